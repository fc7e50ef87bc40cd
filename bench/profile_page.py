"""Where a person's page's time goes, in the world `load.py` leaves: missions written by an agent
the way its agents write them (a record, an operation planned, attempted and completed, a
checkpoint and a heartbeat per step), every other one waiting for an approval. The page is fetched
through Django's test client by the signed-in person, timed (p50 of N), its statements captured
with their times, and profiled with cProfile (top functions by own and cumulative time).

    BENCH_DATABASE_URL=… .venv/bin/python bench/profile_page.py [N] [--inbox] [--missions M]

The mission page by default (the newest mission that waits); `--inbox` profiles `/approvals/`.
"""

import cProfile
import json
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
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

N = int(next((a for a in sys.argv[1:] if a.isdigit()), "60"))
INBOX = "--inbox" in sys.argv
MISSIONS = int(sys.argv[sys.argv.index("--missions") + 1]) if "--missions" in sys.argv else 60
STEPS = 10


def agent_world(client: Client) -> int:
    """MISSIONS missions as load.py's agents write them; the id of the newest one that waits."""
    call = _caller(client)
    waiting = 0
    for number in range(MISSIONS):
        mission = call("POST", "missions", {"title": f"load {number}", "objective": "Book a venue for 12.", "key": uuid.uuid4().hex})
        run = call("POST", f"missions/{mission['id']}/runs", {"agent": "bench", "key": uuid.uuid4().hex})["run"]
        state = common.AgentState(keys=20, key_bytes=500, seed=number)
        for step in range(STEPS):
            call("POST", f"runs/{run['id']}/records", {"kind": "note", "text": f"step {step}: checked the venue list", "key": uuid.uuid4().hex})
            op = call(
                "POST",
                f"runs/{run['id']}/operations",
                {"key": f"email-{step}", "kind": "email.send", "target": f"venue-{step}@example.com", "request": {"subject": "Quote for 12?"}},
            )
            call("POST", f"operations/{op['id']}/attempt")
            call("POST", f"operations/{op['id']}/complete", {"external_id": f"msg-{step}", "external_status": "sent"})
            call("POST", f"runs/{run['id']}/checkpoints", {"agent_state": state.next()[0], "key": uuid.uuid4().hex})
            call("POST", f"runs/{run['id']}/heartbeat")
        if number % 2:
            call(
                "POST",
                f"runs/{run['id']}/approvals",
                {"action": "send the quote requests", "payload": {"venues": STEPS}, "reason": "They go to outside suppliers.", "key": uuid.uuid4().hex},
            )
            waiting = mission["id"]
        else:
            call("POST", f"runs/{run['id']}/stop", {"reason": "completed"})
    return waiting


def _caller(client: Client):
    def call(method: str, path: str, body: dict | None = None):
        response = client.generic(method, f"/api/v1/{path}", data=json.dumps(body or {}), content_type="application/json")
        assert 200 <= response.status_code < 300, (path, response.status_code, response.content[:300])
        return response.json()

    return call


def main() -> None:
    from quests.services.tokens import token_create

    common.remove_bench_data()
    person = common.bench_user("page-person")
    _, raw = token_create(user=person, name="page-agent")
    mission_id = agent_world(Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Bearer {raw}"))
    common.vacuum()
    browser = Client(SERVER_NAME="localhost")  # the test client's own host is not an allowed one
    browser.force_login(person)
    path = "/approvals/" if INBOX else f"/missions/{mission_id}/"

    def fetch() -> int:
        response = browser.get(path)
        assert response.status_code == 200, response.status_code
        return len(response.content)

    for _ in range(10):
        size = fetch()
    took, cpu = [], []
    for _ in range(N):
        t, c = time.perf_counter(), time.thread_time()
        fetch()
        cpu.append((time.thread_time() - c) * 1000)
        took.append((time.perf_counter() - t) * 1000)
    print(f"{path}: {size} bytes; wall p50 {statistics.median(took):.2f} ms, cpu p50 {statistics.median(cpu):.2f} ms over {N}")
    with CaptureQueriesContext(connection) as captured:
        fetch()
    print(f"{len(captured.captured_queries)} queries, {sum(float(q['time']) for q in captured.captured_queries) * 1000:.2f} ms in them:")
    for q in captured.captured_queries:
        print(f"  {float(q['time']) * 1000:.2f} ms  {q['sql'][:140]!r}")
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    for _ in range(N):
        fetch()
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(70)
    common.remove_bench_data()


if __name__ == "__main__":
    main()
