"""The resume bundle: the contract for the next run. Its cost depends on what is live (active
constraints, unresolved records, the ledger), never on how long the history is."""

from typing import Any

from checkpoints.models import DURABLE_RECORD_KINDS, Operation, OperationStatus, Record
from checkpoints.services import checkpoint_agent_state
from quests.models import Mission, Run
from quests.schemas import ResumeBundleOut
from quests.services import machine
from quests.services.memory import memory_for
from quests.services.savestate import DURABLE_SECTIONS

OPERATION_GROUPS = {
    OperationStatus.COMPLETED: "completed",
    OperationStatus.ATTEMPTED: "to_reconcile",
    OperationStatus.PLANNED: "planned",
    OperationStatus.FAILED: "failed",
}


def resume_bundle(mission: Mission, *, for_new_run: bool = False) -> dict[str, Any]:
    return bundle_schema(mission, for_new_run=for_new_run).model_dump()


def bundle_schema(mission: Mission, *, for_new_run: bool = False) -> ResumeBundleOut:
    """The bundle as its schema: the API returns it as is, without a second validation."""
    mission = Mission.objects.select_related("head_checkpoint", "last_verified_checkpoint").get(pk=mission.pk)
    operations: dict[str, list] = {group: [] for group in OPERATION_GROUPS.values()}
    for op in Operation.objects.filter(mission=mission).order_by("id"):
        operations[OPERATION_GROUPS[op.status]].append(op)
    records: dict[str, list] = {section: [] for section in DURABLE_SECTIONS.values()}
    for record in Record.objects.live().filter(mission=mission, kind__in=DURABLE_RECORD_KINDS).order_by("id"):
        records[DURABLE_SECTIONS[record.kind]].append(record)
    milestones = list(mission.milestones.all())
    approvals = list(mission.approvals.all())
    active_run = Run.objects.filter(mission=mission, ended_at__isnull=True).first()
    pending = machine.Pending(
        approval_action=next((a.action for a in approvals if a.status == "pending"), None),
        milestone_title=next((m.title for m in milestones if m.is_gate_awaiting_review), None),
        any_attempted=bool(operations["to_reconcile"]),
        run_number=active_run.number if active_run else None,
    )
    action = machine.next_action(mission, pending, for_new_run=for_new_run)
    head = mission.head_checkpoint
    if head is not None:
        head.agent_state = checkpoint_agent_state(head)
    return ResumeBundleOut.from_orm({
        "mission": mission,
        "next_action": action,
        "message": machine.message(mission, action, pending),
        "checkpoint": head,
        "last_verified_checkpoint": mission.last_verified_checkpoint,
        "constraints": mission.constraints.filter(retired_at__isnull=True).order_by("id"),
        **records,
        "milestones": milestones,
        "approvals": approvals,
        "operations": operations,
        "memory": memory_for(mission.owner),
    })
