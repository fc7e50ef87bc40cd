"""Gathers a mission's save state from both layers and writes it as a checkpoint."""

from typing import Any

from django.conf import settings
from django.db.models import Max

from checkpoints import services as storage
from checkpoints.models import DURABLE_RECORD_KINDS, Checkpoint, Operation, Record, RecordKind
from quests import serializers as ser
from quests.models import Approval, Mission, Milestone, Run

DURABLE_SECTIONS = {
    RecordKind.DECISION: "decisions",
    RecordKind.OPEN_QUESTION: "open_questions",
    RecordKind.BLOCKER: "blockers",
    RecordKind.DEPENDENCY: "dependencies",
}


def live_records(mission: Mission):
    return Record.objects.filter(mission=mission, resolved=False, abandoned=False)


def state_document(mission: Mission) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The save state a checkpoint holds, by section, plus its compaction report and the highest
    record id it saw. Durable records are all kept; notes beyond the newest N and raw tool
    outputs stay in active state only as references and previews (their text is archived)."""
    keep_notes = settings.QUESTLOG_ACTIVE_NOTES
    durable = list(live_records(mission).filter(kind__in=DURABLE_RECORD_KINDS))
    evidence = list(live_records(mission).filter(kind=RecordKind.EVIDENCE))
    notes = list(live_records(mission).filter(kind=RecordKind.NOTE).order_by("-id")[:keep_notes])[::-1]
    tool_outputs = list(live_records(mission).filter(kind=RecordKind.TOOL_OUTPUT).order_by("-id")[:keep_notes])[::-1]
    archived_notes = live_records(mission).filter(kind=RecordKind.NOTE).count() - len(notes)
    doc: dict[str, Any] = {
        "mission": {
            "title": mission.title,
            "objective": mission.objective,
            "status": mission.status,
            "stop_reason": mission.stop_reason,
            "stop_detail": mission.stop_detail,
            "retry_at": ser.iso(mission.retry_at),
        },
        "constraints": [
            {"id": c.pk, "text": c.text, "source": c.source}
            for c in mission.constraints.filter(retired_at__isnull=True)
        ],
        "evidence": [_record_ref(r) for r in evidence],
        "notes": [{"id": r.pk, "text": r.text} for r in notes],
        "tool_outputs": [_record_ref(r) for r in tool_outputs],
        "milestones": [
            {k: v for k, v in ser.milestone_dict(m).items() if k not in ("created_at", "reviewed_at")}
            for m in Milestone.objects.filter(mission=mission)
        ],
        "approvals": [
            {k: v for k, v in ser.approval_dict(a).items() if k not in ("created_at", "decided_at")}
            for a in Approval.objects.filter(mission=mission)
        ],
        "operations": [
            {k: v for k, v in ser.operation_dict(op).items() if k not in ("created_at", "updated_at")}
            for op in Operation.objects.filter(mission=mission)
        ],
    }
    for kind, section in DURABLE_SECTIONS.items():
        doc[section] = [{"id": r.pk, "text": r.text, "data": r.data} for r in durable if r.kind == kind]
    report = {
        "notes_kept": len(notes),
        "notes_archived": max(archived_notes, 0),
        "tool_outputs_archived": len(tool_outputs),
        "archived_bytes": sum(r.size_bytes for r in tool_outputs),
    }
    watermark = Record.objects.filter(mission=mission).aggregate(m=Max("id"))["m"] or 0
    return doc, report, watermark


def _record_ref(record: Record) -> dict[str, Any]:
    return {"id": record.pk, "preview": record.text, "blob": record.blob_id, "size_bytes": record.size_bytes}


def take_checkpoint(
    mission: Mission,
    *,
    trigger: str,
    run: Run | None = None,
    agent_state: dict[str, Any] | None = None,
    note: str = "",
) -> Checkpoint:
    """Write a checkpoint of the mission (whose row the caller holds locked) and move its head."""
    state, report, watermark = state_document(mission)
    checkpoint = storage.checkpoint_write(
        mission_id=mission.pk,
        run_id=run.pk if run else None,
        parent=mission.head_checkpoint,
        seq=mission.next_checkpoint_seq,
        trigger=trigger,
        state=state,
        agent_state=agent_state,
        record_watermark=watermark,
        note=note,
        compaction_report=report,
    )
    mission.head_checkpoint = checkpoint
    mission.next_checkpoint_seq += 1
    mission.save(update_fields=["head_checkpoint", "next_checkpoint_seq", "updated_at"])
    return checkpoint


def state_changed(mission: Mission) -> None:
    """Called by every service that changes save state: bumps the mission's state version (the
    background snapshot uses it to skip no-op work) and asks for a technical snapshot."""
    Mission.objects.filter(pk=mission.pk).update(state_version=mission.state_version + 1)
    mission.state_version += 1
    from quests.services import snapshots

    snapshots.snapshot_request(mission)
