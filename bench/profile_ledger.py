"""Where an operation receipt's time goes, and what of it grows with the ledger: `operations.
operation_complete` on a mission whose ledger holds 10 operations and on one that holds LONG
(1,000), as bench/ledger.py makes them. For each length: wall and CPU p50 of N receipts, the p50
of each statement's time, the size of the mission row's save-state columns, and a cProfile
of N more receipts (CPU time, top functions by own time).

    BENCH_DATABASE_URL=… .venv/bin/python bench/profile_ledger.py [N]"""

import cProfile
import os
import pstats
import statistics
import sys
import time

os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_profile")

import common  # noqa: E402

common.setup()

import ledger  # noqa: E402
from django.db import connection  # noqa: E402

N = int(next((a for a in sys.argv[1:] if a.isdigit()), "200"))
LONG = 1_000


def _short_receipt(actor) -> int:
    """An operation ready to complete, the 10th of a fresh mission's ledger (as bench/ledger.py)."""
    run = ledger._start(actor, "short ledger")
    for _ in range(ledger.SHORT - 1):
        ledger._plan(actor, run)
    return ledger._plan(actor, run, attempt=True)


class _Statements:
    """Each statement's own time (perf_counter, not the query log's rounded milliseconds)."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def __call__(self, execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.times.setdefault(" ".join(sql.split())[:60], []).append((time.perf_counter() - t) * 1000)


def _measure(label: str, actor, ready) -> None:
    """N receipts, each on an operation `ready()` makes just before (untimed): wall and CPU
    p50, each statement's p50, the mission row's size; then N more under cProfile."""
    from checkpoints.hashing import canonical_json
    from checkpoints.models import Operation
    from quests.models import Mission

    took, cpu, statements = [], [], _Statements()
    for _ in range(N):
        op = ready()
        t, c = time.perf_counter(), time.thread_time()
        with connection.execute_wrapper(statements):
            ledger._complete(actor, op)
        cpu.append((time.thread_time() - c) * 1000)
        took.append((time.perf_counter() - t) * 1000)
    print(f"\n== {label}: wall p50 {statistics.median(took):.3f} ms;  cpu p50 {statistics.median(cpu):.3f} ms  over {N}")
    for sql, times in statements.times.items():
        print(f"  {statistics.median(times):.3f} ms p50  x{len(times)}  {sql!r}")
    mission = Mission.objects.get(pk=Operation.objects.get(pk=op).mission_id)
    sizes = {name: len(canonical_json(getattr(mission, name))) for name in ("state_refs", "state_pending", "state_report")}
    print(f"  mission row: {sizes} bytes as JSON; ledger chunks {len(mission.state_report.get('ledger', []))}")
    profile = cProfile.Profile(time.thread_time)  # CPU time: waits on the server fall outside
    for _ in range(N):
        op = ready()
        profile.enable()
        ledger._complete(actor, op)
        profile.disable()
    print(f"\n== cProfile of {N} receipts, {label} (CPU time)")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(30)
    stats.print_callers("sub|iterencode|raw_decode")


def main() -> None:
    from quests.services.audit import Actor

    with common.bench_data():
        actor = Actor(user=common.bench_user("profile-ledger"))
        long_run = ledger._start(actor, "long ledger")
        with common.phase(f"a ledger of {LONG} operations"):
            for _ in range(LONG - 1):
                ledger._complete(actor, ledger._plan(actor, long_run, attempt=True))
        _measure(f"{ledger.SHORT} operations", actor, lambda: _short_receipt(actor))
        _measure(f"{LONG}+ operations", actor, lambda: ledger._plan(actor, long_run, attempt=True))


if __name__ == "__main__":
    main()
