"""Plain dicts for the API objects of API.md — one place, shared by the API, the resume bundle,
the saved state document and the data export."""

from typing import Any

from checkpoints.models import Checkpoint, Operation, Record
from quests.models import Approval, Constraint, MemoryItem, MemoryProposal, Milestone, Mission, Run


def iso(value) -> str | None:
    return value.isoformat() if value else None


def mission_progress(mission: Mission, approved: int, claimed_kinds: list[str]) -> dict[str, int]:
    """`approved` counts approved milestones; `planned` counts the planned milestones plus each
    claimed milestone whose kind matches no planned entry (so duplicates cannot inflate it)."""
    planned_kinds = {m.get("kind") for m in mission.planned_milestones or []}
    extra = sum(1 for kind in claimed_kinds if kind not in planned_kinds)
    return {"approved": approved, "planned": len(mission.planned_milestones or []) + extra}


def mission_dict(mission: Mission, progress: dict[str, int] | None = None) -> dict[str, Any]:
    if progress is None:
        milestones = list(mission.milestones.values_list("kind", "review_status"))
        progress = mission_progress(
            mission, sum(1 for _, s in milestones if s == "approved"), [k for k, _ in milestones]
        )
    return {
        "id": mission.pk,
        "title": mission.title,
        "objective": mission.objective,
        "status": mission.status,
        "stop_reason": mission.stop_reason,
        "stop_detail": mission.stop_detail,
        "retry_at": iso(mission.retry_at),
        "created_at": iso(mission.created_at),
        "ended_at": iso(mission.ended_at),
        "progress": progress,
        "planned_milestones": mission.planned_milestones or [],
        "head_checkpoint_id": mission.head_checkpoint_id,
        "last_verified_checkpoint_id": mission.last_verified_checkpoint_id,
        "retention_approved_at": iso(mission.retention_approved_at),
        "expires_at": iso(mission.expires_at),
        "purged_at": iso(mission.purged_at),
    }


def run_dict(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "mission_id": run.mission_id,
        "number": run.number,
        "agent": run.agent,
        "started_at": iso(run.started_at),
        "heartbeat_at": iso(run.heartbeat_at),
        "ended_at": iso(run.ended_at),
        "stop_reason": run.stop_reason,
        "stop_detail": run.stop_detail,
        "active": run.ended_at is None,
    }


def checkpoint_dict(cp: Checkpoint) -> dict[str, Any]:
    return {
        "id": cp.pk,
        "mission_id": cp.mission_id,
        "run_id": cp.run_id,
        "parent_id": cp.parent_id,
        "seq": cp.seq,
        "trigger": cp.trigger,
        "hash": cp.hash,
        "verified": cp.verified,
        "size_bytes": cp.size_bytes,
        "new_bytes": cp.new_bytes,
        "note": cp.note,
        "created_at": iso(cp.created_at),
        "compaction_report": cp.compaction_report,
    }


def constraint_dict(c: Constraint) -> dict[str, Any]:
    return {
        "id": c.pk,
        "text": c.text,
        "source": c.source,
        "created_at": iso(c.created_at),
        "retired_at": iso(c.retired_at),
        "replaces_id": c.replaces_id,
    }


def record_dict(r: Record) -> dict[str, Any]:
    return {
        "id": r.pk,
        "kind": r.kind,
        "text": r.text,
        "data": r.data,
        "resolved": r.resolved,
        "resolved_by_id": r.resolved_by_id,
        "abandoned": r.abandoned,
        "archived": r.blob_id is not None,
        "blob_sha256": r.blob_id,
        "size_bytes": r.size_bytes,
        "created_at": iso(r.created_at),
    }


def operation_dict(op: Operation) -> dict[str, Any]:
    return {
        "id": op.pk,
        "key": op.key,
        "kind": op.kind,
        "target": op.target,
        "request": op.request,
        "status": op.status,
        "attempts": op.attempts,
        "max_attempts": op.max_attempts,
        "external_id": op.external_id or None,
        "external_status": op.external_status or None,
        "receipt": op.receipt,
        "error": op.error or None,
        "retryable": op.retryable,
        "created_at": iso(op.created_at),
        "updated_at": iso(op.updated_at),
    }


def approval_dict(a: Approval) -> dict[str, Any]:
    return {
        "id": a.pk,
        "mission_id": a.mission_id,
        "action": a.action,
        "payload": a.payload,
        "reason": a.reason,
        "status": a.status,
        "decided_payload": a.decided_payload,
        "note": a.note,
        "checkpoint_id": a.checkpoint_id,
        "expires_at": iso(a.respond_by),
        "created_at": iso(a.created_at),
        "decided_at": iso(a.decided_at),
    }


def milestone_dict(m: Milestone) -> dict[str, Any]:
    return {
        "id": m.pk,
        "mission_id": m.mission_id,
        "kind": m.kind,
        "title": m.title,
        "summary": m.summary,
        "evidence": m.evidence,
        "review_status": m.review_status,
        "note": m.note,
        "gate": m.gate,
        "checkpoint_id": m.checkpoint_id,
        "created_at": iso(m.created_at),
        "reviewed_at": iso(m.reviewed_at),
    }


def memory_item_dict(item: MemoryItem) -> dict[str, Any]:
    return {
        "id": item.pk,
        "name": item.name,
        "value": item.value,
        "source_mission_id": item.source_mission_id,
        "approved_at": iso(item.approved_at),
        "expires_at": iso(item.expires_at),
    }


def memory_proposal_dict(p: MemoryProposal) -> dict[str, Any]:
    return {
        "id": p.pk,
        "mission_id": p.mission_id,
        "name": p.name,
        "value": p.value,
        "reason": p.reason,
        "status": p.status,
        "created_at": iso(p.created_at),
        "decided_at": iso(p.decided_at),
    }
