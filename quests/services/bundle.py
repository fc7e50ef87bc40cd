"""The resume bundle: the contract for the next run. Its cost depends on what is live (active
constraints, unresolved records, the ledger), never on how long the history is."""

from typing import Any

from checkpoints.models import DURABLE_RECORD_KINDS, Operation, OperationStatus, Record
from checkpoints.services import checkpoint_agent_state
from quests import serializers as ser
from quests.models import Mission, Run
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
    mission = Mission.objects.select_related("head_checkpoint", "last_verified_checkpoint").get(pk=mission.pk)
    operations: dict[str, list] = {group: [] for group in OPERATION_GROUPS.values()}
    for op in Operation.objects.filter(mission=mission).order_by("id"):
        operations[OPERATION_GROUPS[op.status]].append(ser.operation_dict(op))
    records: dict[str, list] = {section: [] for section in DURABLE_SECTIONS.values()}
    for record in Record.objects.live().filter(mission=mission, kind__in=DURABLE_RECORD_KINDS).order_by("id"):
        records[DURABLE_SECTIONS[record.kind]].append(ser.record_dict(record))
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
    verified = mission.last_verified_checkpoint
    return {
        "mission": {
            "id": mission.pk, "title": mission.title, "objective": mission.objective, "status": mission.status,
            "stop_reason": mission.stop_reason, "stop_detail": mission.stop_detail, "retry_at": ser.iso(mission.retry_at),
        },
        "next_action": action,
        "message": machine.message(mission, action, pending),
        "checkpoint": None if head is None else {
            "id": head.pk, "seq": head.seq, "hash": head.hash, "verified": head.verified, "trigger": head.trigger,
            "created_at": ser.iso(head.created_at), "agent_state": checkpoint_agent_state(head),
        },
        "last_verified_checkpoint": None if verified is None else {"id": verified.pk, "seq": verified.seq, "hash": verified.hash},
        "constraints": [
            {"id": c.pk, "text": c.text, "source": c.source, "created_at": ser.iso(c.created_at)}
            for c in mission.constraints.filter(retired_at__isnull=True).order_by("id")
        ],
        **records,
        "milestones": [
            {"id": m.pk, "kind": m.kind, "title": m.title, "review_status": m.review_status, "note": m.note, "gate": m.gate}
            for m in milestones
        ],
        "approvals": [
            {"id": a.pk, "action": a.action, "payload": a.payload, "reason": a.reason, "status": a.status,
             "decided_payload": a.decided_payload, "note": a.note}
            for a in approvals
        ],
        "operations": operations,
        "memory": [{"name": item.name, "value": item.value} for item in memory_for(mission.owner)],
    }
