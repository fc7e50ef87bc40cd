"""A mission's lifecycle calls in process (issue 20, item 6): mission create with 1 and with 50
constraints, run start and run stop, each against LangGraph's PostgresSaver `put` in the same
alternating rounds (ratios of p50s, as bench/bench_vs_langgraph.py gives them), with the SQL
statements one call sends (BEGIN and COMMIT included).

    BENCH_QUICK=1 .venv/bin/python bench/bench_lifecycle.py

Environment: BENCH_DATABASE_URL (default: database questlog_bench_lifecycle on 127.0.0.1), BENCH_QUICK=1.
"""

import os
import sys
import uuid

QUICK = os.environ.get("BENCH_QUICK") == "1" or "--quick" in sys.argv
BENCH_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_lifecycle")
os.environ["DATABASE_URL"] = BENCH_URL

import common  # noqa: E402

common.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from rounds import THREAD_PREFIX, Thread, rounds, show, timed  # noqa: E402

from quests.models import StopReason  # noqa: E402
from quests.services import missions, runs  # noqa: E402
from quests.services.audit import Actor  # noqa: E402

ROUNDS = 2 if QUICK else 6
SAMPLES = 5 if QUICK else 30
OBJECTIVE = "Find and book a venue for 12 people in May."


def create(actor: Actor, constraints: int) -> None:
    texts = [f"Constraint {i}: stay under budget and keep the client informed." for i in range(constraints)]
    missions.mission_create(actor=actor, title="lifecycle", objective=OBJECTIVE, constraints=texts, key=uuid.uuid4().hex)


class Cycle:
    """One mission whose runs start and stop in turn: a stop `blocked_external` leaves it startable."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.mission, _ = missions.mission_create(actor=actor, title="cycle", objective=OBJECTIVE, constraints=["Keep it short."])
        self.run = None

    def start(self) -> None:
        self.run, _ = runs.run_start(actor=self.actor, mission_id=self.mission.pk, agent="bench", key=uuid.uuid4().hex)

    def stop(self) -> None:
        runs.run_stop(actor=self.actor, run_id=self.run.pk, reason=StopReason.BLOCKED_EXTERNAL, detail="The venue's site is down.")
        self.run = None

    def timed_start(self) -> float:
        took = timed(self.start)
        self.stop()
        return took

    def timed_stop(self) -> float:
        self.start()
        return timed(self.stop)


def statements(fn) -> int:
    with CaptureQueriesContext(connection) as captured:
        fn()
    return len(captured.captured_queries)


def main() -> int:
    print(f"Mission lifecycle vs LangGraph PostgresSaver put{' (quick mode)' if QUICK else ''}, database {BENCH_URL.rsplit('/', 1)[-1]}")
    with common.bench_data(), PostgresSaver.from_conn_string(BENCH_URL) as saver:
        saver.setup()
        actor = Actor(user=common.bench_user("lifecycle"))
        thread = Thread(saver, f"lifecycle-{uuid.uuid4().hex[:8]}")
        state = common.AgentState(keys=20, key_bytes=500, seed=3)
        starts, stops = Cycle(actor), Cycle(actor)
        paths = {
            "put": lambda: thread.put(*state.next()),
            "create_1": lambda: timed(lambda: create(actor, 1)),
            "create_50": lambda: timed(lambda: create(actor, 50)),
            "start": starts.timed_start,
            "stop": stops.timed_stop,
        }
        for fn in paths.values():  # warm up: prepared statements, caches
            for _ in range(5):
                fn()
        with common.phase(f"{ROUNDS} alternating rounds of {SAMPLES} samples per path"):
            took = rounds(paths, count=ROUNDS, samples=SAMPLES)
        counts = {
            "create_1": statements(lambda: create(actor, 1)),
            "create_50": statements(lambda: create(actor, 50)),
            "start": statements(starts.start),
            "stop": statements(starts.stop),
        }
        put = show("PostgresSaver put", took["put"])
        labels = {
            "create_1": "mission create, 1 constraint",
            "create_50": "mission create, 50 constraints",
            "start": "run start",
            "stop": "run stop (blocked_external)",
        }
        print()
        for name, label in labels.items():
            p50 = show(label, took[name])
            common.figure(f"  {label} vs put (speed: put p50 / its p50)", put / p50, "×", ".2f")
            common.figure(f"  {label}: SQL statements per call (BEGIN, COMMIT included)", counts[name], "", "d")
        common.load_note()
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM checkpoint_writes WHERE thread_id LIKE %s", [THREAD_PREFIX + "%"])
            cursor.execute("DELETE FROM checkpoint_blobs WHERE thread_id LIKE %s", [THREAD_PREFIX + "%"])
            cursor.execute("DELETE FROM checkpoints WHERE thread_id LIKE %s", [THREAD_PREFIX + "%"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
