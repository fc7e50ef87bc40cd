"""The cost of an operation receipt against the length of the mission's ledger (issue 20): the p50
of `operations.operation_complete` when the mission's ledger holds 10 operations, when it holds
LONG (1,000; 100 in quick mode) and when it holds LONGEST (10,000; 300 in quick mode). A
save-state service whose receipts get slower with every operation is the opposite of what it is
for, so the goal is a flat line: ≤ 1.2× at 1,000 and at 10,000. An agent checkpoint on the
mission of 10 and on the one of 10,000 is timed beside them (it reads and writes the mission's
current document, which names the ledger).

Each sample completes an operation that was planned and attempted just before (untimed), so the
ledger is at its stated length when `complete` runs: the short case uses a fresh mission of 9
planned operations for each sample, each long case one mission whose ledger grows by one per
sample (1,000 → 1,000 + samples). The cases run in alternating rounds, like the other paths.

Run by bench/bench_vs_langgraph.py (its goals table), or alone:
    .venv/bin/python bench/ledger.py     (BENCH_QUICK=1 for a smoke run)
"""

import os
import sys
import uuid

if __name__ == "__main__":
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_lg")
    import common

    common.setup()

import common  # noqa: E402
from rounds import ISSUE_20, rounds, show, timed  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1" or "--quick" in sys.argv
SHORT, LONG, LONGEST = 10, (100 if QUICK else 1_000), (300 if QUICK else 10_000)
ROUNDS = 2 if QUICK else 6
SAMPLES = 5 if QUICK else 20


def _start(actor, title: str):
    from quests.services import missions, runs

    mission, _ = missions.mission_create(actor=actor, title=title, objective="Sync every supplier's invoices tonight.")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
    return run


def _plan(actor, run, *, attempt: bool = False) -> int:
    from quests.services import operations

    op, _ = operations.operation_plan(
        actor=actor,
        run_id=run.pk,
        key=uuid.uuid4().hex,
        kind="invoice.fetch",
        target="supplier-42",
        request={"month": "2026-11", "supplier": "supplier-42", "format": "pdf"},
    )
    if attempt:
        operations.operation_attempt(actor=actor, operation_id=op.pk)
    return op.pk


def _complete(actor, operation_id: int) -> None:
    from quests.services import operations

    operations.operation_complete(
        actor=actor,
        operation_id=operation_id,
        external_id=f"INV-{operation_id}",
        external_status="fetched",
        receipt={"pages": 3, "total": 1240.5, "currency": "EUR"},
    )


def _checkpoint(actor, run, state: dict) -> None:
    from quests.services import records

    records.checkpoint_create(actor=actor, run_id=run.pk, agent_state=state, note="", key=uuid.uuid4().hex)


def ledger_receipts(actor) -> dict[str, float]:
    """Prints the p50s and the ratios; adds the goals to issue 20's goals (`rounds.ISSUE_20`)."""
    long_runs = {}
    for length in (LONG, LONGEST):
        with common.phase(f"a mission with a ledger of {length} operations, written through the service"):
            long_runs[length] = _start(actor, f"ledger of {length}")
            for n in range(1, length):
                _complete(actor, _plan(actor, long_runs[length], attempt=True))
                if n % 2_500 == 0:
                    common.vacuum()  # as autovacuum would, while 3 calls per operation write the tables

    def short_sample() -> float:
        run = _start(actor, "short ledger")
        for _ in range(SHORT - 1):
            _plan(actor, run)
        op = _plan(actor, run, attempt=True)
        return timed(lambda: _complete(actor, op))

    def long_sample(length: int) -> float:
        op = _plan(actor, long_runs[length], attempt=True)
        return timed(lambda: _complete(actor, op))

    # 33,000 calls just wrote the ledgers: the statistics are made current, as autovacuum would
    # have made them by then (this machine's PostgreSQL has it off; with the tables' statistics of
    # before the writes every receipt, short ledger or long, took 7.3 ms instead of 2, and the
    # 10,000 operations took 128 s to write instead of 85).
    with common.phase("statistics made current (VACUUM ANALYZE)"):
        common.vacuum()

    # An agent checkpoint reads and writes the mission's current document, which names the ledger:
    # on a mission of SHORT operations and on the one of LONGEST.
    short_run = _start(actor, "short ledger, checkpoints")
    for _ in range(SHORT):
        _plan(actor, short_run)
    states = {length: common.AgentState(keys=20, key_bytes=500, seed=length) for length in (SHORT, LONGEST)}
    checkpoint_runs = {SHORT: short_run, LONGEST: long_runs[LONGEST]}

    def checkpoint_sample(length: int) -> float:
        state = states[length].next()[0]
        return timed(lambda: _checkpoint(actor, checkpoint_runs[length], state))

    paths = {
        SHORT: short_sample,
        LONG: lambda: long_sample(LONG),
        LONGEST: lambda: long_sample(LONGEST),
        f"checkpoint {SHORT}": lambda: checkpoint_sample(SHORT),
        f"checkpoint {LONGEST}": lambda: checkpoint_sample(LONGEST),
    }
    with common.phase(f"{ROUNDS} alternating rounds of {SAMPLES} receipts per ledger length, and of checkpoints"):
        took = rounds(paths, count=ROUNDS, samples=SAMPLES)
    print(f"\n== operation complete (a receipt) with {SHORT}, {LONG} and {LONGEST} operations in the mission's ledger")
    p = {length: show(f"operation complete, {length} operations in the ledger", took[length]) for length in (SHORT, LONG, LONGEST)}
    for length in (LONG, LONGEST):
        common.figure(f"operation complete {length} / {SHORT}", p[length] / p[SHORT], "×", ".2f")
    checkpoint = {length: show(f"agent checkpoint (service), {length} operations in the ledger", took[f"checkpoint {length}"]) for length in (SHORT, LONGEST)}
    common.figure(f"agent checkpoint {LONGEST} / {SHORT}", checkpoint[LONGEST] / checkpoint[SHORT], "×", ".2f")
    common.load_note()
    for length in (LONG, LONGEST):
        ISSUE_20.append((f"operation complete p50, {length} vs {SHORT} operations in the ledger", p[length] / p[SHORT], "<=", 1.2))
    return {"short": p[SHORT], "long": p[LONG], "longest": p[LONGEST]}


if __name__ == "__main__":
    from rounds import GOALS, goal

    from quests.services.audit import Actor

    with common.bench_data():
        ledger_receipts(Actor(user=common.bench_user("ledger")))
    for label, ratio, op, target in ISSUE_20:
        goal(label, ratio, op, target)
    common.table("Goal of issue 20 (ledger)", [(label, value, f"{target} {verdict}") for label, value, target, verdict in GOALS])
