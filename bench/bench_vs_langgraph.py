"""Questlog against LangGraph's PostgresSaver (langgraph-checkpoint-postgres), in one process on one
PostgreSQL, on one workload: an agent state of 20 top-level keys of ~500 B, one key changed per
checkpoint. It prints each path's p50/p95 and rate, the ratios, and the goals of issue 10 with PASS
or MISS (a MISS is a figure, not a failure: the script fails only on errors).

    .venv/bin/python bench/bench_vs_langgraph.py     (or `make bench`; BENCH_QUICK=1 for a smoke run)

Paths: PostgresSaver `put` (only the changed channel in new_versions, as LangGraph's loop passes
it) and `get_tuple` (latest checkpoint); Questlog's ORM writer (`checkpoints.services.checkpoint_write`,
which tools and tests build histories with, not the agent's path, with an empty state document and
the mission's head and seq moved by hand), the service checkpoint
(`records.checkpoint_create` in a started run, a fresh idempotency key per call), the resume bundle
at 10 and at 2,000 checkpoints of history (every one written through the service: no copied rows),
a checkpoint POSTed over HTTP to the web server by one agent in a loop (through questlog_client, as
an agent calls Questlog, and for reference through a bare httpx.Client), and an operation receipt
(`operation_complete`) with 10, 1,000 and 10,000 operations in the ledger (bench/ledger.py). Timed paths run in
alternating rounds (each round starts with the next path) so machine noise falls on all alike.
One more path is not a goal's: PostgresSaver's put with the agent's own work before each call (a
busy loop as long as the in-process API checkpoint's own CPU time, measured first in the same
run). On this VM a commit's flush and the backend's wake-up cost more when the database waited
idle before the statement than when statements come back to back (an autocommit 3 KB INSERT:
0.34 ms back to back, 0.7–1.0 ms after 1–3 ms of client work): `put` timed in a tight loop never
waits so, while each of Questlog's calls does its own Python work first. The paced figure says
how much of a ratio is that. Once the histories are written, the database is vacuumed and analyzed (`common.vacuum`), as
autovacuum would have done in production by then: this machine has autovacuum off, and statistics
taken when the tables were empty had both systems look rows up by sequential scans over thousands of
rows (PostgresSaver's get_tuple grew 4.8× from 10 to 2,000 checkpoints with them, 1.4× without).
A ratio of speeds is taken from p50s: "0.5× put" means a p50 at most twice put's.

Bytes per checkpoint: for each system, the growth of `pg_database_size` over N (2,000; 100 in quick
mode) checkpoints written the real way, divided by N. Each system writes into a fresh database of
its own (created for the measure and dropped after), so no free space left by earlier runs absorbs
the writes and neither system's tables share pages with the other's; Questlog's writes run in a
child process whose Django points at its fresh database. The baseline is taken after a warm-up of
20 checkpoints (schema, first pages, mission, run and thread rows are not per-checkpoint costs).
Autovacuum is switched off on every table of both fresh databases before the warm-up: otherwise it
may or may not run during the writes and hand dead space back for reuse, which makes the figure
move from run to run; with it off, every row, index entry, audit row and dead row version of an
update counts, for both systems alike. No CHECKPOINT is needed: files grow when pages are added,
not when they are flushed. The relations that grew most are printed under each figure.
What still moves between runs (PostgresSaver gave 2,933 B in every run here, Questlog 4,493–4,776 B):
the mission row is updated by every checkpoint, and its dead versions are reclaimed in place (HOT
pruning) only when no older snapshot holds PostgreSQL's cleanup horizon back; on a cluster busy with
other work it sometimes is, and quests_mission then grew ~190 B per checkpoint (0 B otherwise).
PostgresSaver only inserts, so it is not exposed to this.

The paths over HTTP are bench/over_http.py's; the workload's sizes, bench/workload.py's.

Environment: BENCH_DATABASE_URL (default: database questlog_bench_lg on 127.0.0.1), BENCH_QUICK=1.
"""

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

BYTES_CHILD = "--bytes-child" in sys.argv
BENCH_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_lg")
# The child measuring Questlog's bytes runs Django on its own fresh database.
os.environ["DATABASE_URL"] = os.environ["BENCH_BYTES_URL"] if BYTES_CHILD else BENCH_URL

import common  # noqa: E402

common.setup()

from dbsize import AUTOVACUUM_OFF, RELATIONS, SIZE, breakdown, database_url, drop_database, fresh_database  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from ledger import ledger_receipts  # noqa: E402
from over_http import http_checkpoints, saver_over_http  # noqa: E402
from psycopg import sql  # noqa: E402
from rounds import GOALS, ISSUE_20, THREAD_PREFIX, Thread, goal, rounds, show, timed  # noqa: E402
from workload import BYTES_N, HISTORY_LONG, HISTORY_SHORT, KEY_BYTES, KEYS, QUICK, ROUNDS, SAMPLES, WARM_UP  # noqa: E402

from checkpoints import services as storage  # noqa: E402
from quests.services import bundle, missions, records, runs  # noqa: E402
from quests.services.audit import Actor  # noqa: E402

# ---- the paths: one small function each, so a changed signature is a one-line fix ----------------


def ql_storage_write(mission, run, state) -> None:
    """The ORM writer that tools, tests and benchmarks build histories with (the agent's checkpoints
    go through the engine): an empty state document, the head and seq moved by hand."""
    with transaction.atomic():
        checkpoint = storage.checkpoint_write(
            mission_id=mission.pk,
            run_id=run.pk,
            parent=mission.head_checkpoint,
            seq=mission.next_checkpoint_seq,
            trigger="agent",
            state={},
            agent_state=state,
        )
        mission.head_checkpoint = checkpoint
        mission.next_checkpoint_seq += 1
        mission.save(update_fields=["head_checkpoint", "next_checkpoint_seq", "updated_at"])


def ql_service_checkpoint(actor, run, state) -> None:
    records.checkpoint_create(actor=actor, run_id=run.pk, agent_state=state, note="", key=uuid.uuid4().hex)


def ql_api_client(actor):
    """Django's test client with an agent token: the in-process API path, every middleware included."""
    from django.test import Client

    from quests.services.tokens import token_create

    _, raw = token_create(user=actor.user, name=f"bench-{uuid.uuid4().hex[:6]}")
    # The test client's default host is not in ALLOWED_HOSTS; a real agent talks to localhost.
    return Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Bearer {raw}")


def ql_api_checkpoint(client, run, state) -> None:
    answer = client.post(f"/api/v1/runs/{run.pk}/checkpoints", {"agent_state": state, "key": uuid.uuid4().hex}, content_type="application/json")
    assert answer.status_code == 201, answer.content


def ql_resume(mission) -> None:
    bundle.resume_bundle(mission)


def ql_start(actor, title: str):
    mission, _ = missions.mission_create(actor=actor, title=title, objective="Find and book a venue for 12 people in May.")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
    mission.refresh_from_db()
    return mission, run


# ---- measuring -----------------------------------------------------------------------------------


def query_count(path: Callable[[], float]) -> int:
    """Statements one call of a path sends (transaction statements included): where time goes."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        path()
    return len(captured.captured_queries)


def agent_cpu(call: Callable[[], None], n: int = 60) -> float:
    """The p50 CPU time (seconds) of this thread's own work in `call`: Django, the service and the
    client's side of the database, without the waits."""
    spent = []
    for _ in range(n):
        start = time.thread_time()
        call()
        spent.append(time.thread_time() - start)
    return statistics.median(spent)


def busy(seconds: float) -> None:
    """Keep this thread's CPU busy for `seconds`, as an agent's work between two saves does, while
    the database's backend waits idle for the next statement."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def checkpoint_paths(saver: PostgresSaver, actor) -> dict[str, float]:
    states = {name: common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=i) for i, name in enumerate(("lg", "st", "sv", "api"))}
    thread = Thread(saver, f"put-{uuid.uuid4().hex[:8]}")
    mission_st, run_st = ql_start(actor, "storage writes")
    _, run_sv = ql_start(actor, "service checkpoints")
    _, run_api = ql_start(actor, "API checkpoints")
    client = ql_api_client(actor)
    with common.phase(f"histories of 10 and of {HISTORY_LONG} checkpoints, written the real way"):
        short, long = ql_start(actor, "history 10"), ql_start(actor, "history long")
        t_short, t_long = Thread(saver, f"short-{uuid.uuid4().hex[:8]}"), Thread(saver, f"long-{uuid.uuid4().hex[:8]}")
        for (_mission, run), t, n in ((short, t_short, HISTORY_SHORT), (long, t_long, HISTORY_LONG)):
            state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=n)
            for _ in range(n):
                current, changed = state.next()
                ql_service_checkpoint(actor, run, current)
                t.put(current, changed)
    with common.phase("statistics made current, as autovacuum keeps them (both systems' tables)"):
        common.vacuum()
    pace = agent_cpu(lambda: ql_api_checkpoint(client, run_api, states["api"].next()[0]))
    paced = Thread(saver, f"paced-{uuid.uuid4().hex[:8]}")
    states["paced"] = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=7)
    paths = {
        "put": lambda: thread.put(*states["lg"].next()),
        "put_paced": lambda: (busy(pace), paced.put(*states["paced"].next()))[1],
        "storage": lambda: (lambda s: timed(lambda: ql_storage_write(mission_st, run_st, s)))(states["st"].next()[0]),
        "service": lambda: (lambda s: timed(lambda: ql_service_checkpoint(actor, run_sv, s)))(states["sv"].next()[0]),
        "api": lambda: (lambda s: timed(lambda: ql_api_checkpoint(client, run_api, s)))(states["api"].next()[0]),
        "get_tuple_10": lambda: timed(t_short.get_tuple),
        "get_tuple_long": lambda: timed(t_long.get_tuple),
        "resume_10": lambda: timed(lambda: ql_resume(short[0])),
        "resume_long": lambda: timed(lambda: ql_resume(long[0])),
    }
    with common.phase(f"{ROUNDS} alternating rounds of {SAMPLES} samples per path"):
        took = rounds(paths, count=ROUNDS, samples=SAMPLES)
    queries = {name: query_count(paths[name]) for name in ("storage", "service", "api", "resume_10", "resume_long")}
    print(f"\n== checkpoint writes (agent state of {KEYS} keys of ~{KEY_BYTES} B, one key changed each)")
    p = {"put": show("PostgresSaver put", took["put"])}
    p["put_paced"] = show(f"PostgresSaver put, each after {pace * 1000:.2f} ms of the agent's own CPU work (paced)", took["put_paced"])
    p["storage"] = show("Questlog's ORM writer for tools and tests (checkpoints.services.checkpoint_write, not the agent's path)", took["storage"])
    p["service"] = show("Questlog service checkpoint (records.checkpoint_create)", took["service"])
    common.figure("ORM writer vs put (speed)", p["put"] / p["storage"], "×", ".2f")
    p["api"] = show("Questlog agent checkpoint through the in-process API (test client, all middleware)", took["api"])
    common.figure("service checkpoint vs put (speed)", p["put"] / p["service"], "×", ".2f")
    common.figure("in-process API checkpoint vs put (speed)", p["put"] / p["api"], "×", ".2f")
    common.figure("in-process API checkpoint vs paced put (speed; not a goal: what stands in the way)", p["put_paced"] / p["api"], "×", ".2f")
    common.figure(
        "SQL statements per call: ORM writer / service checkpoint / API checkpoint (with BEGIN, COMMIT)",
        f"{queries['storage']} / {queries['service']} / {queries['api']}",
    )
    print(f"\n== resume (latest state) at {HISTORY_SHORT} and {HISTORY_LONG} checkpoints of history")
    for n, suffix in ((HISTORY_SHORT, "10"), (HISTORY_LONG, "long")):
        p[f"get_{suffix}"] = show(f"PostgresSaver get_tuple, {n} checkpoints", took[f"get_tuple_{suffix}"])
        p[f"resume_{suffix}"] = show(f"Questlog resume_bundle, {n} checkpoints", took[f"resume_{suffix}"])
        common.figure(f"resume_bundle / get_tuple at {n}", p[f"resume_{suffix}"] / p[f"get_{suffix}"], "×", ".2f")
    common.figure(f"growth {HISTORY_SHORT} → {HISTORY_LONG}: PostgresSaver", p["get_long"] / p["get_10"], "×", ".2f")
    common.figure(f"growth {HISTORY_SHORT} → {HISTORY_LONG}: Questlog", p["resume_long"] / p["resume_10"], "×", ".2f")
    common.figure(f"SQL statements per resume_bundle at {HISTORY_SHORT} / {HISTORY_LONG}", f"{queries['resume_10']} / {queries['resume_long']}")
    common.load_note()
    goal("service checkpoint write vs PostgresSaver put (speed)", p["put"] / p["service"], ">=", 0.5)
    ISSUE_20.append(("agent checkpoint through the in-process API vs put (speed)", p["put"] / p["api"], ">=", 0.25))
    ISSUE_20.append((f"resume bundle p50 / get_tuple p50 at {HISTORY_SHORT}", p["resume_10"] / p["get_10"], "<=", 3))
    ISSUE_20.append((f"resume bundle growth {HISTORY_SHORT} → {HISTORY_LONG}", p["resume_long"] / p["resume_10"], "<=", 1.2))
    goal(f"resume bundle p50 / get_tuple p50 at {HISTORY_SHORT}", p["resume_10"] / p["get_10"], "<=", 3)
    goal(f"resume bundle growth {HISTORY_SHORT} → {HISTORY_LONG}", p["resume_long"] / p["resume_10"], "<=", 1.2)
    return p


# ---- bytes ---------------------------------------------------------------------------------------


def bytes_questlog_child() -> None:
    """In the child, on its fresh database: warm up, then N service checkpoints; prints the growth
    and where it went."""
    with connection.cursor() as cursor:
        cursor.execute(AUTOVACUUM_OFF)
    actor = Actor(user=common.bench_user("bytes"))
    _, run = ql_start(actor, "bytes")
    state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=5)
    for _ in range(WARM_UP):
        ql_service_checkpoint(actor, run, state.next()[0])
    with connection.cursor() as cursor:
        cursor.execute(SIZE)
        before = cursor.fetchone()[0]
        cursor.execute(RELATIONS)
        relations = dict(cursor.fetchall())
        for _ in range(BYTES_N):
            ql_service_checkpoint(actor, run, state.next()[0])
        cursor.execute(RELATIONS)
        print("\n".join(breakdown(relations, dict(cursor.fetchall()), BYTES_N)))
        cursor.execute(SIZE)
        print(f"GROWTH {cursor.fetchone()[0] - before}", flush=True)


def bytes_langgraph(url: str) -> tuple[int, list[str]]:
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        saver.conn.execute(AUTOVACUUM_OFF)
        thread, state = Thread(saver, "bytes"), common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=5)
        for _ in range(WARM_UP):
            thread.put(*state.next())
        relations = lambda: {row["relname"]: row["bytes"] for row in saver.conn.execute(RELATIONS)}  # noqa: E731
        before, before_relations = saver.conn.execute(SIZE).fetchone()["pg_database_size"], relations()
        for _ in range(BYTES_N):
            thread.put(*state.next())
        lines = breakdown(before_relations, relations(), BYTES_N)
        return saver.conn.execute(SIZE).fetchone()["pg_database_size"] - before, lines


def bytes_per_checkpoint() -> None:
    ql_url, lg_url = database_url(BENCH_URL, "_bytes_ql"), database_url(BENCH_URL, "_bytes_lg")
    try:
        with common.phase(f"LangGraph: {BYTES_N} puts into a fresh database"):
            fresh_database(lg_url)
            lg_growth, lg_lines = bytes_langgraph(lg_url)
            lg = lg_growth / BYTES_N
        with common.phase(f"Questlog: {BYTES_N} service checkpoints into a fresh database (child process)"):
            fresh_database(ql_url)
            env = {**os.environ, "BENCH_BYTES_URL": ql_url, "BENCH_QUICK": "1" if QUICK else "0"}
            out = subprocess.run([sys.executable, __file__, "--bytes-child"], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"bytes child failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
            ql = int(out.stdout.split("GROWTH ")[-1].split()[0]) / BYTES_N
            ql_lines = [line for line in out.stdout.splitlines() if line.startswith("    ")]
    finally:
        drop_database(lg_url)
        drop_database(ql_url)
    print(f"\n== bytes per checkpoint (growth of pg_database_size over {BYTES_N} checkpoints, fresh databases, autovacuum off)")
    common.figure("PostgresSaver", lg, "B", ".0f")
    print("\n".join(lg_lines))
    common.figure("Questlog (service checkpoints)", ql, "B", ".0f")
    print("\n".join(ql_lines))
    common.figure("Questlog / PostgresSaver", ql / lg, "×", ".2f")
    goal("bytes per checkpoint vs PostgresSaver", ql / lg, "<=", 1.0)
    ISSUE_20.append(("bytes per checkpoint vs PostgresSaver", ql / lg, "<=", 1.0))


def remove_threads(saver: PostgresSaver) -> None:
    for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
        saver.conn.execute(sql.SQL("DELETE FROM {} WHERE thread_id LIKE %s").format(sql.Identifier(table)), [THREAD_PREFIX + "%"])


def main() -> int:
    print(f"Questlog vs LangGraph PostgresSaver{' (quick mode)' if QUICK else ''}, database {urlsplit(BENCH_URL).path.lstrip('/')}")
    with common.bench_data(), PostgresSaver.from_conn_string(BENCH_URL) as saver:
        saver.setup()
        remove_threads(saver)
        try:
            checkpoint_paths(saver, Actor(user=common.bench_user("lg")))
            http_checkpoints(saver, BENCH_URL)
            saver_over_http(saver, BENCH_URL)
            ledger_receipts(Actor(user=common.bench_user("ledger")))
        finally:
            remove_threads(saver)
    bytes_per_checkpoint()
    common.table("Goals of issues 10 and 11 (ratios from this run)", [(label, value, f"{target} {verdict}") for label, value, target, verdict in GOALS])
    GOALS.clear()
    for label, ratio, op, target in ISSUE_20:
        goal(label, ratio, op, target)
    common.table("Goals of issue 20 (ratios from this run)", [(label, value, f"{target} {verdict}") for label, value, target, verdict in GOALS])
    return 0


if __name__ == "__main__":
    if BYTES_CHILD:
        bytes_questlog_child()
        sys.exit(0)
    sys.exit(main())
