"""The operation ledger alone (issue 20): the p50 of `operation complete` at 10, 1,000 and 10,000
operations in the ledger (bench/ledger.py, the same phase `make bench` runs), and the statements
each operation call sends (the transaction's own BEGIN and COMMIT left out). `--profile` adds a
cProfile of `operation complete` on the long ledger: where its time goes. Not a bench_*.py: `make
bench` times the same phase in bench/bench_vs_langgraph.py; this runs it alone.

    .venv/bin/python bench/operations.py [--profile]     (BENCH_QUICK=1 for a smoke run)
"""

import os
import sys

os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench")
import common  # noqa: E402

common.setup()

import cProfile  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402

import ledger  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from rounds import GOALS, ISSUE_20, goal  # noqa: E402

TRANSACTION = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")


def statements(call) -> int:
    with CaptureQueriesContext(connection) as captured:
        call()
    return sum(1 for q in captured.captured_queries if not q["sql"].startswith(TRANSACTION))


def statements_per_call(actor, run) -> None:
    from quests.services import operations

    planned: list[int] = []
    counts = {
        "plan": statements(lambda: planned.append(ledger._plan(actor, run))),
        "attempt": statements(lambda: operations.operation_attempt(actor=actor, operation_id=planned[0])),
        "complete": statements(lambda: ledger._complete(actor, planned[0])),
        "observe": statements(lambda: operations.operation_observe(actor=actor, operation_id=planned[0], external_status="filed")),
    }
    failing = ledger._plan(actor, run, attempt=True)
    counts["fail"] = statements(lambda: operations.operation_fail(actor=actor, operation_id=failing, error="refused", retryable=False))
    print("\n== statements per operation call (BEGIN and COMMIT left out)")
    for name, count in counts.items():
        print(f"operation {name}: {count}")


def profile_complete(actor, run, samples: int = 200) -> None:
    ops = [ledger._plan(actor, run, attempt=True) for _ in range(samples)]
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    for op in ops:
        ledger._complete(actor, op)
    profile.disable()
    print(f"\n== cProfile of operation complete ({samples} calls, {(time.perf_counter() - started) * 1000 / samples:.2f} ms a call with the profiler)")
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    from quests.services.audit import Actor

    with common.bench_data():
        actor = Actor(user=common.bench_user("operations"))
        ledger.ledger_receipts(actor)
        run = ledger._start(actor, "statements")
        for _ in range(ledger.LONG):
            ledger._plan(actor, run)
        statements_per_call(actor, run)
        if "--profile" in sys.argv:
            profile_complete(actor, run)
    for label, ratio, op, target in ISSUE_20:
        goal(label, ratio, op, target)
    common.table("Goals of issue 20 (operation ledger)", [(label, value, f"{target} {verdict}") for label, value, target, verdict in GOALS])
