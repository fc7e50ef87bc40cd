"""A person's export of their own data: everything Questlog holds about them, and nothing of
anyone else (staff holds stay with staff)."""

from typing import Any

from django.db.models import Model
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, Record
from checkpoints.services import blobs_get, checkpoint_documents
from quests.schemas import (
    ApprovalOut, CheckpointOut, ConstraintOut, MemoryItemOut, MemoryProposalOut, MilestoneOut, MissionOut, OperationOut,
    RecordOut, RunOut, dump,
)
from quests.models import AgentToken, AuditEvent, MemoryItem, MemoryProposal, Mission
from quests.services.access import require_person
from quests.services.audit import Actor


def account_export(*, actor: Actor) -> dict[str, Any]:
    """Everything Questlog holds about this person, and nothing of anyone else."""
    require_person(actor)
    user = actor.user
    missions = Mission.objects.filter(owner=user).order_by("created_at", "id")
    return {
        "format": "questlog-export/1",
        "exported_at": _iso(timezone.now()),
        "user": {
            "username": user.get_username(), "email": user.email, "first_name": user.first_name,
            "last_name": user.last_name, "date_joined": _iso(user.date_joined),
        },
        "missions": [_mission_export(mission) for mission in missions],
        "memory": {
            "items": [_lifecycle(item, dump(MemoryItemOut, item)) for item in MemoryItem.objects.filter(owner=user).order_by("id")],
            "proposals": [_lifecycle(p, dump(MemoryProposalOut, p)) for p in MemoryProposal.objects.filter(owner=user).order_by("id")],
        },
        "agent_tokens": [
            {"id": t.pk, "name": t.name, "prefix": t.prefix, "mission_id": t.mission_id, "created_at": _iso(t.created_at),
             "last_used_at": _iso(t.last_used_at), "revoked_at": _iso(t.revoked_at)}
            for t in AgentToken.objects.filter(user=user).order_by("id")
        ],
    }


def _iso(value: Any) -> str | None:
    # The export's own fields (tokens, events, activity) spell time as the API's objects do.
    return value.isoformat() if value else None


def _lifecycle(obj: Model, data: dict[str, Any]) -> dict[str, Any]:
    return {
        **data,
        "lifecycle": {
            "created_at": _iso(obj.created_at), "retention_class": obj.retention_class,
            "retention_approved_at": _iso(obj.retention_approved_at), "expires_at": _iso(obj.expires_at),
        },
    }


def _mission_export(mission: Mission) -> dict[str, Any]:
    records = list(Record.objects.filter(mission=mission).order_by("id"))
    raw = blobs_get([r.blob_id for r in records if r.blob_id])
    operations = list(Operation.objects.filter(mission=mission).prefetch_related("events").order_by("id"))
    return {
        **_lifecycle(mission, dump(MissionOut, mission)),
        "runs": [dump(RunOut, run) for run in mission.runs.order_by("number")],
        "constraints": [_lifecycle(c, dump(ConstraintOut, c)) for c in mission.constraints.order_by("id")],
        "checkpoints": [_checkpoint_export(cp) for cp in Checkpoint.objects.filter(mission=mission).order_by("seq")],
        "records": [
            _lifecycle(r, {**dump(RecordOut, r), "raw_text": raw[r.blob_id].decode(errors="replace") if r.blob_id in raw else None})
            for r in records
        ],
        "ledger": [
            _lifecycle(op, {
                **dump(OperationOut, op),
                "events": [
                    {"event": e.event, "external_status": e.external_status or None, "receipt": e.receipt, "error": e.error or None,
                     "created_at": _iso(e.created_at)}
                    for e in op.events.all()
                ],
            })
            for op in operations
        ],
        "approvals": [_lifecycle(a, dump(ApprovalOut, a)) for a in mission.approvals.order_by("id")],
        "milestones": [_lifecycle(m, dump(MilestoneOut, m)) for m in mission.milestones.order_by("id")],
        "activity": [
            {"created_at": _iso(e.created_at), "actor": e.actor, "entity": e.entity, "entity_id": e.entity_id,
             "action": e.action, "from_state": e.from_state, "to_state": e.to_state}
            # Staff holds are not the person's data; they stay with staff.
            for e in AuditEvent.objects.filter(mission=mission).exclude(entity="hold").order_by("id")
        ],
    }


def _checkpoint_export(checkpoint: Checkpoint) -> dict[str, Any]:
    state, agent_state = checkpoint_documents(checkpoint)
    return _lifecycle(checkpoint, {**dump(CheckpointOut, checkpoint), "state": state, "agent_state": agent_state})
