"""What each section of a mission's state document is made of, read straight from its tables, and
the value the section holds (items by `checkpoints.sections`' serialisers). `savestate` keeps the
current document from these; the full rebuild reads every one."""

from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, QuerySet, Sum

from checkpoints import sections
from checkpoints.models import Operation, Record, RecordKind
from quests.models import Approval, Constraint, Milestone

RECORD_SECTIONS = sections.RECORD_SECTIONS
_RECORD_COLUMNS = ("id", "kind", "text", "data", "blob_id", "size_bytes")


def section_rows(mission_id: int, name: str) -> QuerySet:
    """What a section is made of, read straight from its table."""
    if name == "constraints":
        return Constraint.objects.filter(mission_id=mission_id, retired_at__isnull=True).order_by("id").values("id", "text", "source")
    if name == "milestones":
        return Milestone.objects.filter(mission_id=mission_id).order_by("id").values(*sections.COLUMNS[name])
    if name == "approvals":
        return Approval.objects.filter(mission_id=mission_id).order_by("id").values(*sections.COLUMNS[name])
    if name == "operations":
        return ledger_rows(mission_id)
    kind = next(k for k, section in RECORD_SECTIONS.items() if section == name)
    live = Record.objects.live().filter(mission_id=mission_id, kind=kind)
    newest, unarchived_only = record_window(kind)
    if unarchived_only:
        live = live.filter(archived=False)
    if newest is not None:
        return live.order_by("-id").values(*_RECORD_COLUMNS)[:newest]
    return live.order_by("id").values(*_RECORD_COLUMNS)


def record_window(kind: str) -> tuple[int | None, bool]:
    """Which live records of a kind its section is made of: the newest N, newest first (None: all
    of them, oldest first), and whether only those not archived."""
    if kind == RecordKind.NOTE:
        # The newest N notes not yet archived (one more, to see whether older ones wait for the
        # archive pass); older notes are in the archive, not in active state.
        return settings.QUESTLOG_ACTIVE_NOTES + 1, True
    if kind == RecordKind.TOOL_OUTPUT:
        return settings.QUESTLOG_ACTIVE_NOTES, False
    return None, False


def record_rows_after(record: Record, stored_data: Any, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a record section is made of once `record` (a live record just written, newer than
    every other of its kind; `stored_data` its data as the database keeps and reads it back: 1e300
    comes back as an integer) joined it, from the rows of its window read before (newest first, at
    most the window's N): what `section_rows` reads after the insert."""
    newest, _ = record_window(record.kind)
    rows = [{**{column: getattr(record, column) for column in _RECORD_COLUMNS}, "data": stored_data}, *before]
    return rows[:newest] if newest is not None else rows[::-1]


def section_value(name: str, rows: list[Any]) -> list[Any]:
    if name == "constraints":
        return [dict(row) for row in rows]
    if name in sections.ITEMS:
        return list(map(sections.ITEMS[name], rows))
    if name == "notes":
        return [{"id": r["id"], "text": r["text"]} for r in rows[: settings.QUESTLOG_ACTIVE_NOTES]][::-1]
    if name == "tool_outputs":
        return [_record_ref(r) for r in rows][::-1]
    if name == "evidence":
        return [_record_ref(r) for r in rows]
    return [{"id": r["id"], "text": r["text"], "data": r["data"]} for r in rows]


def _record_ref(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "preview": row["text"], "blob": row["blob_id"], "size_bytes": row["size_bytes"]}


def archive_counts(mission_id: int) -> QuerySet:
    """What compaction has moved out of active state on the mission's live branch: archived notes
    and raw tool outputs (archived when recorded), with their bytes."""
    moved = Q(kind=RecordKind.NOTE, archived=True) | Q(kind=RecordKind.TOOL_OUTPUT)
    return (
        Record.objects.filter(moved, mission_id=mission_id, abandoned=False)
        .values("mission_id")
        .annotate(
            notes=Count("pk", filter=Q(kind=RecordKind.NOTE)),
            tool_outputs=Count("pk", filter=Q(kind=RecordKind.TOOL_OUTPUT)),
            bytes=Sum("size_bytes"),
            watermark=Max("pk"),
        )
    )


def ledger_rows(mission_id: int) -> QuerySet:
    return Operation.objects.filter(mission_id=mission_id).order_by("id").values(*sections.COLUMNS["operations"])
