"""Issue 20's ledger goal: an operation `complete` costs the same with 1,000 operations in the
mission's ledger as with 10. Each sample plans and attempts a fresh operation (not timed), then
times its `complete` through the service."""

import uuid

import common
from rounds import ISSUE_20, rounds, show

from checkpoints.models import Operation
from quests.services import missions, operations, runs
from quests.services.savestate import state_rebuild

SMALL, LARGE = 10, 1_000


def _mission_with_ledger(actor, size: int):
    mission, _ = missions.mission_create(actor=actor, title=f"ledger of {size}", objective="Book a venue.")
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
    Operation.objects.bulk_create(
        Operation(mission=mission, run=run, key=f"done-{i}", request_hash="0" * 64, kind="email.send", target=f"t{i}", status="completed")
        for i in range(size)
    )
    state_rebuild(mission.pk)
    return run


def _complete_once(actor, run) -> float:
    op, _ = operations.operation_plan(actor=actor, run_id=run.pk, key=uuid.uuid4().hex, kind="email.send", target="a@example.com", request={})
    operations.operation_attempt(actor=actor, operation_id=op.pk)
    return common.timed(
        operations.operation_complete, actor=actor, operation_id=op.pk, external_id="msg", external_status="sent", receipt={"ok": True}
    )


def ledger_growth(actor, *, count: int = 4, samples: int = 20) -> None:
    small, large = _mission_with_ledger(actor, SMALL), _mission_with_ledger(actor, LARGE)
    with common.phase(f"{count} alternating rounds of {samples} operation completions at {SMALL} and {LARGE} operations"):
        took = rounds({"small": lambda: _complete_once(actor, small), "large": lambda: _complete_once(actor, large)}, count=count, samples=samples)
    print(f"\n== operation complete with {SMALL} and {LARGE} operations in the ledger")
    at_small = show(f"operation_complete, {SMALL} operations", took["small"])
    at_large = show(f"operation_complete, {LARGE} operations", took["large"])
    common.figure(f"growth {SMALL} → {LARGE}", at_large / at_small, "×", ".2f")
    ISSUE_20.append((f"operation complete p50 at {LARGE} / at {SMALL} operations", at_large / at_small, "<=", 1.2))
