"""Compaction of a mission's active state: what the next run needs stays in the checkpoint, the
rest moves to content-addressed blobs with a reference and a preview left behind.

Pinned kinds (decisions, open questions, blockers, dependencies — and, above this layer,
constraints and approvals) are never compacted: they are the reasons behind the plan. Notes beyond
the newest N are archived; raw tool outputs are archived the moment they are recorded. The cost of
compacting is bounded by what changed since the previous checkpoint, never by the history length:
each report carries running totals and the id below which every note is already archived."""

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Sum

from checkpoints.models import DURABLE_RECORD_KINDS, Record, RecordKind
from checkpoints.services import blobs_put

PINNED_KINDS = frozenset(DURABLE_RECORD_KINDS)


def preview(text: str, limit: int) -> str:
    """The short text an archived record keeps in active state."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def live_records(mission_id: int):
    return Record.objects.live().filter(mission_id=mission_id)


@dataclass(frozen=True)
class Archived:
    """What one compaction pass moved out of active state, and the notes that stay in it."""

    note_ids: list[int]
    note_bytes: int
    note_cutoff: int
    kept_notes: list[Record]


def notes_archive(*, mission_id: int, keep: int, preview_chars: int, since_cutoff: int = 0) -> Archived:
    """Archive every live note older than the newest `keep`. The caller holds the mission's lock.

    Notes below `since_cutoff` were archived by an earlier pass, so only notes from there on are
    read — the newest `keep` plus whatever came since: the pass costs what changed, not the
    history. Returns the newest `keep` notes too, oldest first: they are the active notes."""
    if keep < 0:
        raise ValueError("keep must be zero or more")
    unarchived = list(
        live_records(mission_id).filter(kind=RecordKind.NOTE, archived=False, pk__gte=since_cutoff).order_by("pk")
    )
    split = max(len(unarchived) - keep, 0)
    stale, kept = unarchived[:split], unarchived[split:]
    if not stale:
        return Archived(note_ids=[], note_bytes=0, note_cutoff=since_cutoff, kept_notes=kept)
    hashes, _ = blobs_put([r.text.encode() for r in stale], media_type="text/plain")
    for record, sha in zip(stale, hashes):
        record.size_bytes = record.size_bytes or len(record.text.encode())
        record.blob_id = sha
        record.archived = True
        record.text = preview(record.text, preview_chars)
    Record.objects.bulk_update(stale, ["blob", "archived", "text", "size_bytes"])
    return Archived(
        note_ids=[r.pk for r in stale],
        note_bytes=sum(r.size_bytes for r in stale),
        note_cutoff=max(stale[-1].pk + 1, since_cutoff),
        kept_notes=kept,
    )


def tool_outputs_since(
    *, mission_id: int, after_id: int, newest: list[dict[str, Any]] | None = None, limit: int = 0
) -> tuple[int, int]:
    """How many live raw tool outputs (and their bytes) were recorded after `after_id`. When the
    caller already holds the newest `limit` of them (oldest first) and they reach back past
    `after_id` — the usual case between two checkpoints — they answer without a query."""
    if newest is not None and limit and (len(newest) < limit or newest[0]["id"] <= after_id):
        new = [r for r in newest if r["id"] > after_id]
        return len(new), sum(r["size_bytes"] for r in new)
    agg = live_records(mission_id).filter(kind=RecordKind.TOOL_OUTPUT, pk__gt=after_id).aggregate(
        n=Count("pk"), b=Sum("size_bytes")
    )
    return agg["n"] or 0, agg["b"] or 0


def report(
    *, previous: dict[str, Any], archived: Archived, new_tool_outputs: tuple[int, int], kept: dict[str, int]
) -> dict[str, Any]:
    """The short compaction report a checkpoint carries: what this checkpoint's active state
    keeps, what was archived while writing it, and the running totals of the branch."""
    before = previous.get("archived_total") or {}
    tool_count, tool_bytes = new_tool_outputs
    total = {
        "notes": int(before.get("notes", 0)) + len(archived.note_ids),
        "tool_outputs": int(before.get("tool_outputs", 0)) + tool_count,
        "bytes": int(before.get("bytes", 0)) + archived.note_bytes + tool_bytes,
    }
    return {
        "kept": kept,
        "archived_now": {
            "notes": len(archived.note_ids),
            "note_ids": archived.note_ids[:50],
            "tool_outputs": tool_count,
            "bytes": archived.note_bytes + tool_bytes,
        },
        "archived_total": total,
        "note_cutoff": archived.note_cutoff,
        "pinned": sorted(str(k) for k in PINNED_KINDS) + ["constraints", "approvals"],
        "summary": summary(total, kept),
    }


def summary(total: dict[str, int], kept: dict[str, int]) -> str:
    archived = f"{total['notes']} note(s) and {total['tool_outputs']} raw tool output(s) archived ({_size(total['bytes'])})"
    return (
        f"{archived}; active state keeps the newest {kept.get('notes', 0)} note(s), "
        f"{kept.get('tool_outputs', 0)} tool-output preview(s) and every decision, constraint, approval, "
        "open question, blocker and dependency."
    )


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
