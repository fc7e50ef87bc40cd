"""Where the service checkpoint's time goes: `records.checkpoint_create` in a started run (as
bench_vs_langgraph.py calls it), timed (p50 of N calls), its statements captured, and profiled
with cProfile (top functions by own and cumulative time).

    BENCH_DATABASE_URL=… .venv/bin/python bench/profile_checkpoint.py [N] [--saver | --api]

`--saver` profiles the LangGraph put endpoint's service (`saves.graph_put`) instead; `--api`
profiles the whole request as gunicorn hands it to Django (the WSGI handler called with an
environ, an agent token and the JSON body: every middleware, the endpoint and the service)."""

import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid

os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_profile")

import common  # noqa: E402

common.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from quests.services import missions, records, runs  # noqa: E402

N = int(next((a for a in sys.argv[1:] if a.isdigit()), "300"))
SAVER = "--saver" in sys.argv
API = "--api" in sys.argv


def main() -> None:
    common.remove_bench_data()
    user = common.bench_user("profile")
    from quests.services.audit import Actor

    actor = Actor(user=user)
    mission, _ = missions.mission_create(actor=actor, title="profile", objective="Profile the checkpoint.")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
    state = common.AgentState(keys=20, key_bytes=500, seed=1)
    if SAVER:
        call = saver_call(actor)
    elif API:
        call = api_call(actor, run.pk)
    else:
        call = lambda s: records.checkpoint_create(actor=actor, run_id=run.pk, agent_state=s, note="", key=uuid.uuid4().hex)  # noqa: E731
    for _ in range(50):
        call(state.next()[0])
    took, cpu = [], []
    for s in [state.next()[0] for _ in range(N)]:
        t, c = time.perf_counter(), time.thread_time()
        call(s)
        cpu.append((time.thread_time() - c) * 1000)
        took.append((time.perf_counter() - t) * 1000)
    # CPU time is this thread's own work (Python, encoding, socket calls): the machine's noise and
    # the server's time fall outside it.
    p10 = statistics.quantiles(took, n=10)[0], statistics.quantiles(cpu, n=10)[0]
    print(f"wall p50 {statistics.median(took):.3f} ms  p10 {p10[0]:.3f} ms;  cpu p50 {statistics.median(cpu):.3f} ms  p10 {p10[1]:.3f} ms  over {N}")
    with CaptureQueriesContext(connection) as captured:
        call(state.next()[0])
    for q in captured.captured_queries:
        print(f"  {q['time']}s  {q['sql'][:100]!r}")
    ahead = [state.next()[0] for _ in range(N)]  # made before: the profile shows the call alone
    profile = cProfile.Profile(time.thread_time)  # CPU time: waits on the server fall outside
    profile.enable()
    for s in ahead:
        call(s)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(45)
    common.remove_bench_data()


def api_call(actor, run_id: int):
    """POST /api/v1/runs/{id}/checkpoints through Django's WSGI handler, as a gunicorn worker calls it."""
    import io
    import json

    from django.core.handlers.wsgi import WSGIHandler

    from quests.services.tokens import token_create

    _, raw = token_create(user=actor.user, name=f"profile-{uuid.uuid4().hex[:6]}")
    handler = WSGIHandler()
    path = f"/api/v1/runs/{run_id}/checkpoints"

    def call(state):
        body = json.dumps({"agent_state": state, "key": uuid.uuid4().hex}).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "localhost:8000",
            "HTTP_AUTHORIZATION": f"Bearer {raw}",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        statuses = []
        response = handler(environ, lambda status, headers, exc_info=None: statuses.append(status))
        b"".join(response)
        response.close()
        assert statuses[0].startswith("201"), statuses

    return call


def saver_call(actor):
    """LangGraph's loop saving through `saves.graph_put`: every channel of the state at first, then
    the ones that changed, each save the child of the one before (as QuestlogSaver.put sends it)."""
    from quests.langgraph.services import saves

    thread_id = f"profile-{uuid.uuid4().hex[:8]}"
    last: dict = {"parent": None, "state": {}, "versions": {}, "step": 0}

    def call(state):
        last["step"] += 1
        graph_id = f"1f0{last['step']:013d}-{uuid.uuid4().hex[:8]}"
        changed = {name: value for name, value in state.items() if last["state"].get(name) is not value}
        versions = {**last["versions"], **{name: f"{last['step']:032d}.0" for name in changed}}
        channels = {name: {"version": versions[name], "value": {"type": "json", "data": value}} for name, value in changed.items()}
        skeleton = {"v": 4, "id": graph_id, "ts": "2026-12-04T00:00:00+00:00", "channel_versions": versions, "versions_seen": {}}
        saves.graph_put(
            actor=actor,
            thread_id=thread_id,
            ns="",
            graph_id=graph_id,
            parent_graph_id=last["parent"],
            skeleton=skeleton,
            metadata={"source": "loop", "step": last["step"]},
            channels=channels,
        )
        last.update(parent=graph_id, state=state, versions=versions)

    return call


if __name__ == "__main__":
    main()
