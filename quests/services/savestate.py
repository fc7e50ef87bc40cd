"""Gathers a mission's save state from both layers and writes it as a checkpoint."""

from typing import Any

from django.conf import settings
from django.db.models import Max

from checkpoints import compaction, services as storage
from checkpoints.models import DURABLE_RECORD_KINDS, Checkpoint, Operation, Record, RecordKind
from quests.models import Approval, Mission, Milestone, Run
from quests.schemas import ApprovalOut, MilestoneOut, MissionSummaryOut, OperationOut, dump

# The document leaves out when a row was made or last changed: only what the next run needs.
TIMES = {"created_at", "updated_at", "reviewed_at", "decided_at"}

DURABLE_SECTIONS = {
    RecordKind.DECISION: "decisions",
    RecordKind.OPEN_QUESTION: "open_questions",
    RecordKind.BLOCKER: "blockers",
    RecordKind.DEPENDENCY: "dependencies",
}


def state_document(mission: Mission) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The save state a checkpoint holds, by section, plus its compaction report and the highest
    record id it saw. The caller holds the mission's row lock: compaction archives as it goes.

    Pinned sections (constraints, approvals, decisions, open questions, blockers, dependencies)
    are kept whole. Notes beyond the newest N move to archived blobs; raw tool outputs were
    archived when recorded. Both stay in active state only as a reference and a preview, and the
    compaction report says what was archived and how many bytes."""
    keep = settings.QUESTLOG_ACTIVE_NOTES
    parent = mission.head_checkpoint
    previous = (parent.compaction_report or {}) if parent else {}
    archived = compaction.notes_archive(
        mission_id=mission.pk,
        keep=keep,
        preview_chars=settings.QUESTLOG_PREVIEW_CHARS,
        since_cutoff=int(previous.get("note_cutoff") or 0),
    )
    # Plain rows rather than model instances: a snapshot reads these on every change.
    columns = ("id", "kind", "text", "data", "blob_id", "size_bytes")
    pinned = list(Record.objects.live().filter(mission=mission, kind__in=[*DURABLE_RECORD_KINDS, RecordKind.EVIDENCE]).values(*columns))
    notes = archived.kept_notes
    tool_outputs = list(Record.objects.live().filter(mission=mission, kind=RecordKind.TOOL_OUTPUT).order_by("-id").values(*columns)[:keep])[::-1]
    doc: dict[str, Any] = {
        "mission": dump(MissionSummaryOut, mission, exclude={"id"}),
        "constraints": list(mission.constraints.filter(retired_at__isnull=True).order_by("id").values("id", "text", "source")),
        "evidence": [_record_ref(r) for r in pinned if r["kind"] == RecordKind.EVIDENCE],
        "notes": [{"id": r.pk, "text": r.text} for r in notes],
        "tool_outputs": [_record_ref(r) for r in tool_outputs],
        "milestones": [dump(MilestoneOut, m, exclude=TIMES) for m in Milestone.objects.filter(mission=mission)],
        "approvals": [dump(ApprovalOut, a, exclude=TIMES) for a in Approval.objects.filter(mission=mission)],
        "operations": [dump(OperationOut, op, exclude=TIMES) for op in Operation.objects.filter(mission=mission)],
    }
    for kind, section in DURABLE_SECTIONS.items():
        doc[section] = [{"id": r["id"], "text": r["text"], "data": r["data"]} for r in pinned if r["kind"] == kind]
    new_tool_outputs = compaction.tool_outputs_since(
        mission_id=mission.pk, after_id=parent.record_watermark if parent else 0, newest=tool_outputs, limit=keep
    )
    kept = {"notes": len(notes), "tool_outputs": len(tool_outputs), **{s: len(doc[s]) for s in DURABLE_SECTIONS.values()}}
    kept["constraints"] = len(doc["constraints"])
    kept["approvals"] = len(doc["approvals"])
    report = compaction.report(previous=previous, archived=archived, new_tool_outputs=new_tool_outputs, kept=kept)
    # The next run learns that more exists than it sees, and where to find it.
    doc["archive"] = report["archived_total"]
    # Any record this mission gets later has a higher id than every id handed out so far (its
    # writers hold the mission lock, which the caller holds), so the table's highest id is a
    # valid watermark, read from the primary key index at a cost that does not grow.
    watermark = Record.objects.aggregate(m=Max("id"))["m"] or 0
    return doc, report, watermark


def _record_ref(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "preview": row["text"], "blob": row["blob_id"], "size_bytes": row["size_bytes"]}


def take_checkpoint(
    mission: Mission,
    *,
    trigger: str,
    run: Run | None = None,
    agent_state: dict[str, Any] | None = None,
    note: str = "",
) -> Checkpoint:
    """Write a checkpoint of the mission (whose row the caller holds locked) and move its head."""
    return _write(mission, state_document(mission), trigger=trigger, run=run, agent_state=agent_state, note=note)


def take_checkpoint_if_changed(mission: Mission, *, trigger: str) -> Checkpoint | None:
    """A system checkpoint carrying the head's agent state, unless its content hash would equal
    the head's: then nothing is written (a snapshot of unchanged state is no snapshot)."""
    document = state_document(mission)
    head = mission.head_checkpoint
    if head is not None:
        refs = {key: storage.sha256_hex(storage.canonical_json(value)) for key, value in document[0].items()}
        if storage.document_hash(refs, head.agent_state_refs) == head.hash:
            return None
    return _write(mission, document, trigger=trigger)


def _write(
    mission: Mission,
    document: tuple[dict[str, Any], dict[str, Any], int],
    *,
    trigger: str,
    run: Run | None = None,
    agent_state: dict[str, Any] | None = None,
    note: str = "",
) -> Checkpoint:
    state, report, watermark = document
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
