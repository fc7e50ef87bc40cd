"""Compaction of a mission's active state: what the next run needs stays in the checkpoint, the
rest moves to content-addressed blobs with a reference and a preview left behind.

Pinned kinds (decisions, open questions, blockers, dependencies — and, above this layer,
constraints and approvals) are never compacted: they are the reasons behind the plan. Notes beyond
the newest N are archived; raw tool outputs are archived the moment they are recorded. The cost of
compacting is bounded by what changed since the previous checkpoint, never by the history length:
the mission keeps the totals and the id below which every note is already archived."""

from dataclasses import dataclass, field
from typing import Any

from checkpoints.models import DURABLE_RECORD_KINDS, Blob, Record, RecordKind
from checkpoints.services import blob_rows, sha256_hex

PINNED_KINDS = frozenset(DURABLE_RECORD_KINDS)


def preview(text: str, limit: int) -> str:
    """The short text an archived record keeps in active state."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def live_records(mission_id: int):
    return Record.objects.live().filter(mission_id=mission_id)


@dataclass(frozen=True)
class Archived:
    """What one compaction pass moves out of active state: the notes, their blobs to store and
    their new previews. Nothing is written here: the checkpoint that reports the pass writes it in
    its own statement (quests.engine.checkpoints.checkpoint_write)."""

    note_ids: list[int]
    note_bytes: int
    note_cutoff: int
    blobs: list[Blob] = field(default_factory=list)
    previews: dict[int, tuple[str, str, int]] = field(default_factory=dict)  # id -> (blob, preview, size)


NOTHING_ARCHIVED = Archived(note_ids=[], note_bytes=0, note_cutoff=0)


def notes_archive(*, mission_id: int, keep: int, preview_chars: int, since_cutoff: int = 0) -> Archived:
    """Plan the archiving of every live note older than the newest `keep` (one query). The caller
    holds the mission's lock.

    Notes below `since_cutoff` were archived by an earlier pass, so only notes from there on are
    read — the newest `keep` plus whatever came since: the pass costs what changed, not the
    history."""
    if keep < 0:
        raise ValueError("keep must be zero or more")
    unarchived = list(
        live_records(mission_id).filter(kind=RecordKind.NOTE, archived=False, pk__gte=since_cutoff).order_by("pk").values_list("pk", "text", "size_bytes")
    )
    split = max(len(unarchived) - keep, 0)
    stale = unarchived[:split]
    if not stale:
        return Archived(note_ids=[], note_bytes=0, note_cutoff=since_cutoff)
    previews: dict[int, tuple[str, str, int]] = {}
    contents: dict[str, bytes] = {}
    for pk, text, size in stale:
        content = text.encode()
        sha = sha256_hex(content)
        contents[sha] = content
        previews[pk] = (sha, preview(text, preview_chars), size or len(content))
    return Archived(
        note_ids=[pk for pk, _, _ in stale],
        note_bytes=sum(size for _, _, size in previews.values()),
        note_cutoff=max(stale[-1][0] + 1, since_cutoff),
        blobs=blob_rows(contents, media_type="text/plain"),
        previews=previews,
    )


def report(*, archived: Archived, tool_outputs: tuple[int, int], total: dict[str, int], kept: dict[str, int], note_cutoff: int) -> dict[str, Any]:
    """The short compaction report a checkpoint carries: what this checkpoint's active state
    keeps, what was archived since the previous checkpoint (notes by this pass, raw tool outputs
    as they were recorded), and the totals of the mission's live branch."""
    tool_count, tool_bytes = tool_outputs
    return {
        "kept": kept,
        "archived_now": {
            "notes": len(archived.note_ids),
            "note_ids": archived.note_ids[:50],
            "tool_outputs": tool_count,
            "bytes": archived.note_bytes + tool_bytes,
        },
        "archived_total": dict(total),
        "note_cutoff": note_cutoff,
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


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
