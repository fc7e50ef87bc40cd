"""Where an operation receipt's time goes, and what of it grows with the ledger: `operations.
operation_complete` on a mission whose ledger holds 10 operations and on one that holds LONG
(1,000), as bench/ledger.py makes them. For each length: wall and CPU p50 of N receipts, the p50
of each statement's time, the size of the mission row's save-state columns, and a cProfile
of N more receipts (CPU time, top functions by own time).

`--chunk=SIZE` measures instead what another chunk size would cost, in alternating rounds on two
missions of LONG operations, one whose ledger was written in chunks of `LEDGER_CHUNK` and one in
chunks of SIZE: the p50 of a receipt (as above) and of an agent checkpoint (20 keys of 500 B, one
changed each time). Smaller chunks hold fewer rows, but a group's map holds more of them
(LEDGER_FANOUT chunks to a group) and the document more groups.

`--by-rows` separates what a receipt pays per row of its chunk from what it pays for the length
of the ledger: short and long receipts in turn, the long ones' p50 grouped by how many rows the
chunk they rewrite holds (1–10, 11–20, …), each against the short ones' p50 (10 rows).

    BENCH_DATABASE_URL=… .venv/bin/python bench/profile_ledger.py [N] [--chunk=SIZE | --by-rows]"""

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
    print(f"  mission row: {sizes} bytes as JSON; ledger groups {len(mission.state_report.get('ledger', []))}")
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


def against_chunk_size(actor, other: int) -> None:
    import uuid

    from rounds import rounds, show, timed

    from checkpoints import sections
    from checkpoints.hashing import canonical_json
    from checkpoints.services import ledger_expanded
    from quests.models import Mission
    from quests.services import records

    chunk = sections.LEDGER_CHUNK
    runs = {}
    for size in (chunk, other):
        sections.LEDGER_CHUNK = size  # the chunks a plan splits off (the document's format stays)
        with common.phase(f"a ledger of {LONG} operations in chunks of {size}"):
            runs[size] = ledger._start(actor, f"ledger in chunks of {size}")
            for _ in range(LONG):
                ledger._complete(actor, ledger._plan(actor, runs[size], attempt=True))
    sections.LEDGER_CHUNK = chunk
    states = {size: common.AgentState(keys=20, key_bytes=500, seed=size) for size in runs}

    def checkpoint(size: int) -> float:
        state = states[size].next()[0]
        return timed(lambda: records.checkpoint_create(actor=actor, run_id=runs[size].pk, agent_state=state, note="", key=uuid.uuid4().hex))

    def receipt(size: int) -> float:
        sections.LEDGER_CHUNK = size
        op = ledger._plan(actor, runs[size], attempt=True)
        took = timed(lambda: ledger._complete(actor, op))
        sections.LEDGER_CHUNK = chunk
        return took

    for name, sample in (("receipt", receipt), ("checkpoint", checkpoint)):
        with common.phase(f"6 alternating rounds of {name}s"):
            took = rounds({size: (lambda size=size: sample(size)) for size in runs}, count=6, samples=max(N // 6, 1))
        print(f"\n== {name} on a mission of {LONG}+ operations, by ledger chunk size")
        p50 = {size: show(f"{name}, chunks of {size}", took[size]) for size in runs}
        common.figure(f"{name}, chunks of {other} / chunks of {chunk}", p50[other] / p50[chunk], "×", ".2f")
    for size, run in runs.items():
        mission = Mission.objects.get(pk=run.mission_id)
        chunks = sum(1 for name in ledger_expanded(mission.state_refs)[0] if sections.chunk_of(name))
        print(
            f"  chunks of {size}: {chunks} chunks in {len(mission.state_report['ledger'])} groups; state_refs {len(canonical_json(mission.state_refs))} B, state_report {len(canonical_json(mission.state_report))} B"
        )
    common.load_note()


def by_rows(actor) -> None:
    from rounds import timed

    from checkpoints import sections
    from checkpoints.models import Operation

    long_run = ledger._start(actor, "long ledger")
    with common.phase(f"a ledger of {LONG} operations"):
        for _ in range(LONG - 1):
            ledger._complete(actor, ledger._plan(actor, long_run, attempt=True))
    short, grouped = [], {}
    with common.phase(f"{N} receipts of each length, in turn"):
        for _ in range(N):
            op = _short_receipt(actor)
            short.append(timed(lambda: ledger._complete(actor, op)))
            op = ledger._plan(actor, long_run, attempt=True)
            # Operations go into chunks in id order, LEDGER_CHUNK to a chunk.
            rows = Operation.objects.filter(mission_id=long_run.mission_id, id__lt=op).count() % sections.LEDGER_CHUNK + 1
            grouped.setdefault((rows - 1) // 10, []).append(timed(lambda: ledger._complete(actor, op)))
    base = statistics.median(short) * 1000
    print(f"\n== receipts by the rows of the chunk they rewrite\n  {ledger.SHORT} operations: p50 {base:.3f} ms over {len(short)}")
    for group in sorted(grouped):
        p50 = statistics.median(grouped[group]) * 1000
        print(f"  {LONG}+ operations, {group * 10 + 1}–{group * 10 + 10} rows: p50 {p50:.3f} ms ({p50 / base:.2f}×) over {len(grouped[group])}")
    common.load_note()


def main() -> None:
    from quests.services.audit import Actor

    if "--by-rows" in sys.argv:
        with common.bench_data():
            by_rows(Actor(user=common.bench_user("profile-ledger")))
        return
    other = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--chunk=")), None)
    if other is not None:
        with common.bench_data():
            against_chunk_size(Actor(user=common.bench_user("profile-ledger")), other)
        return
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
