"""A mission's save state: its state document, kept current section by section (written as a
checkpoint by `quests.services.checkpointing`).

The state document has one section per kind of thing the next run needs (constraints, decisions,
notes, the operation ledger, …). Each section is stored as its own content-addressed blob, so a
checkpoint is a map of refs. Rebuilding every section from its table on every checkpoint made a
checkpoint cost as much as the whole mission; instead the mission row keeps the document *as it is
now* (`Mission.state_refs`), and each service that changes a section refreshes that section only,
in the same transaction (`read_sections` + `apply_sections`, or `sections_refresh`). A checkpoint
then costs its agent-state parts plus a copy of the current refs. The sections changed since the
last checkpoint wait in `Mission.state_pending` as canonical JSON until a checkpoint stores them.

`state_document` is the full rebuild, straight from the tables: the current document must always
equal it (tests/test_properties_savestate.py checks that after random sequences of changes).

Two sections are made from the mission row itself when a checkpoint is written: `mission` (its
title, status, …) and `archive` (how much compaction has moved out of active state)."""

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import Max

from checkpoints import sections, services as storage
from checkpoints.models import Operation, Record, RecordKind
from quests.models import Mission
from quests.services.section_reads import archive_counts, section_rows, section_value

DURABLE_SECTIONS = {
    RecordKind.DECISION: "decisions",
    RecordKind.OPEN_QUESTION: "open_questions",
    RecordKind.BLOCKER: "blockers",
    RecordKind.DEPENDENCY: "dependencies",
}
RECORD_SECTIONS = sections.RECORD_SECTIONS
# The sections kept current by the services; `mission` and `archive` come from the mission row.
SECTIONS = sections.KEPT
ZERO_TOTAL = {"notes": 0, "tool_outputs": 0, "bytes": 0}
# --- The current document, kept up to date -------------------------------------------------------


def record_change(kind: str, *, resolves: bool = False) -> str:
    """What a new record changes (`checkpoints.sections.CHANGES`): its own section, and any
    record section when it resolves one."""
    return "record.resolving" if resolves else f"record.{kind}"


def read_sections(mission_id: int, names: Iterable[str]) -> dict[str, list[Any]]:
    """The rows each of `names` is made of, read from its table; pass them to `apply_sections`."""
    return {name: list(section_rows(mission_id, name)) for name in dict.fromkeys(names)}


def apply_sections(mission: Mission, read: dict[str, list[Any]]) -> None:
    """Make the mission's current document hold these sections as read. Saved by
    `state_changed` or a checkpoint."""
    report = report_of(mission)
    for name, found in read.items():
        if name == "operations":
            apply_ledger(mission, sections.ledger_parts(list(map(sections.operation_item, found))), whole=True)
            continue
        value = section_value(name, found)
        _set_part(mission, name, value)
        report["kept"][name] = len(value)
        if name == "notes":
            report["archive_due"] = len(found) > settings.QUESTLOG_ACTIVE_NOTES


def _set_part(mission: Mission, name: str, value: Any) -> None:
    content = storage.canonical_json(value)
    mission.state_refs[name] = storage.sha256_hex(content)
    mission.state_pending[name] = content.decode()
    report_of(mission)["sizes"][name] = len(content)


def unstored_parts(mission: Mission) -> dict[str, bytes]:
    """The parts made in this transaction that the current document refers to and no row holds:
    the caller stores them as blobs ({sha256: content}) with the mission row's update, under the
    blob writers' lock (the collector counts the current documents' refs as references)."""
    return mission.__dict__.pop("_unstored_parts", {})


def _drop_part(mission: Mission, name: str) -> None:
    for kept in (mission.state_refs, mission.state_pending, report_of(mission)["sizes"]):
        kept.pop(name, None)


# The ledger is kept in chunks gathered in groups (checkpoints.sections): a change to one operation
# rewrites the chunk that holds it and its group's map, a new operation the last chunk and group,
# whatever the length of the ledger.


def ledger_chunk_of(mission: Mission, operation_id: int | None = None) -> sections.LedgerChunk:
    """The ledger chunk a change rewrites, with its group, from the current document as made in
    this transaction: the chunk that holds `operation_id`, or (None: an operation about to be
    planned) the last one. For a document just built (`ensure_current`) or one that names a part
    whose blob is gone: the ledger's parts are made again from its rows unless this transaction
    made them. (The operation ledger's lock reads the chunk as stored, in its statement:
    `quests.engine.operations`.)"""
    bound = sections.PAST_EVERY_ID if operation_id is None else operation_id
    unstored = mission.__dict__.get("_unstored_parts", {})
    groups = [first for first in report_of(mission)["ledger"] if first <= bound]
    if not groups:
        return sections.NO_LEDGER
    group_first = max(groups)
    group = unstored.get(mission.state_refs.get(sections.group_key(group_first)))
    if group is None:
        sections_refresh(mission, ["operations"])
        return ledger_chunk_of(mission, operation_id)
    refs = sections.group_chunks(group)
    first = max(chunk[1] for name in refs if (chunk := sections.chunk_of(name)) is not None and chunk[1] <= bound)
    return sections.LedgerChunk(first=first, content=unstored[refs[sections.chunk_key("operations", first)]], group_first=group_first, group=group)


def ledger_changed(mission: Mission, chunk: sections.LedgerChunk, item: dict[str, Any]) -> None:
    """Make the current document hold the operation `item` as changed, in the chunk (and group)
    read for it."""
    group = sections.group_key(chunk.group_first) if chunk.group_first is not None else ""
    apply_ledger(mission, sections.ledger_change(chunk, item, report_of(mission)["sizes"].get(group, 0)))


def apply_ledger(mission: Mission, made: sections.LedgerParts, *, whole: bool = False) -> None:
    """Make the current document hold these ledger groups, or only them when `whole`. The groups
    and their chunks are stored as blobs by the writer that made them (`unstored_parts`), not kept
    on the mission row until a checkpoint: the row would carry the whole ledger."""
    report = report_of(mission)
    if whole:
        for name in [name for name in mission.state_refs if sections.is_ledger_part(name)]:
            _drop_part(mission, name)
    unstored = mission.__dict__.setdefault("_unstored_parts", {})
    unstored.update(made.chunks)
    for name, content in made.groups.items():
        mission.state_refs[name] = sha = storage.sha256_hex(content)
        unstored[sha] = content
        report["sizes"][name] = made.sizes[name]
    firsts = set() if whole else set(report["ledger"])
    report["ledger"] = sorted(firsts | {first for name in made.groups if (first := sections.group_of(name)) is not None})


def ledger_row(op: Operation) -> dict[str, Any]:
    """An operation as changed in memory, as a row of its table (`sections.COLUMNS`)."""
    return {name: getattr(op, name) for name in sections.COLUMNS["operations"]}


def sections_refresh(mission: Mission, names: Iterable[str] = SECTIONS, *, recount: bool = False) -> None:
    """Read and apply sections; `recount` also recounts the archive totals and the
    record watermark from the tables (after a restore, or for a mission never built)."""
    read = read_sections(mission.pk, names)
    counts = list(archive_counts(mission.pk)) if recount else None
    apply_sections(mission, read)
    if set(SECTIONS) <= read.keys():
        # Every section is now made by this format's serialisers.
        report_of(mission)["format"] = sections.FORMAT
    if counts is not None:
        row = counts[0] if counts else {}
        report = report_of(mission)
        report["archived_total"] = {"notes": row.get("notes", 0), "tool_outputs": row.get("tool_outputs", 0), "bytes": row.get("bytes") or 0}
        report["watermark"] = Record.objects.filter(mission_id=mission.pk).aggregate(m=Max("pk"))["m"] or 0


def new_mission_document(mission: Mission, constraints: list[dict[str, Any]]) -> None:
    """The current document of a mission just created, made without reading its tables: every
    section empty but its constraints (rows as `section_rows` reads them), nothing archived. It
    is what `sections_refresh(recount=True)` would read back."""
    mission.state_refs, mission.state_pending, mission.state_report = {}, {}, {}
    apply_sections(mission, {name: constraints if name == "constraints" else [] for name in SECTIONS})
    report_of(mission)["format"] = sections.FORMAT


def ensure_current(mission: Mission) -> bool:
    """Build the current document of a mission that has none yet (one written before it was kept),
    or one made by serialisers of an older format (`checkpoints.sections.FORMAT`). Says whether it did."""
    if mission.state_refs and mission.state_report.get("format") == sections.FORMAT:
        return False
    mission.state_refs, mission.state_pending = {}, {}
    mission.state_report = {k: v for k, v in mission.state_report.items() if k != "sizes"}
    sections_refresh(mission, recount=True)
    return True


def state_rebuild(mission_id: int) -> Mission:
    """Rebuild a mission's current document from its tables and save it (the caller holds the lock)."""
    mission = Mission.objects.get(pk=mission_id)
    mission.state_refs, mission.state_pending, mission.state_report = {}, {}, {}
    sections_refresh(mission, recount=True)
    storage.blobs_put(list(unstored_parts(mission).values()))
    Mission.objects.filter(pk=mission.pk).update(**current_fields(mission))
    return mission


def current_fields(mission: Mission) -> dict[str, Any]:
    """The mission's current-document columns, for an update."""
    return {"state_refs": mission.state_refs, "state_pending": mission.state_pending, "state_report": mission.state_report}


def record_added(mission: Mission, record: Record) -> None:
    """Count a new record into the archive totals and the watermark (its section is refreshed by
    the caller): a raw tool output is archived the moment it is recorded."""
    report = report_of(mission)
    report["watermark"] = max(report["watermark"], record.pk)
    if record.kind == RecordKind.TOOL_OUTPUT:
        for counter in (report["archived_total"], report["since"]):
            counter["tool_outputs"] += 1
            counter["bytes"] += record.size_bytes


def report_of(mission: Mission) -> dict[str, Any]:
    """The mission's state report (compaction's totals and cut-offs, the sections' sizes, the
    record watermark, the first ids of the ledger's groups), its defaults filled in: in place, as
    the checkpoint write updates it."""
    report = mission.state_report
    report.setdefault("archived_total", dict(ZERO_TOTAL))
    report.setdefault("since", {"tool_outputs": 0, "bytes": 0})
    report.setdefault("kept", {})
    report.setdefault("sizes", {})
    report.setdefault("note_cutoff", 0)
    report.setdefault("archive_due", False)
    report.setdefault("watermark", 0)
    report.setdefault("ledger", [])
    return report


# --- The full rebuild -------------------------------------------------------------------------------


def state_document(mission: Mission) -> dict[str, Any]:
    """The state document rebuilt from the tables, with no side effect: what the current document
    must equal at every moment."""
    read = read_sections(mission.pk, SECTIONS)
    counts = list(archive_counts(mission.pk))
    document: dict[str, Any] = {name: section_value(name, rows) for name, rows in read.items() if name != "operations"}
    ledger = sections.ledger_parts(list(map(sections.operation_item, read["operations"])))
    document.update((name, sections.group_chunks(group)) for name, group in ledger.groups.items())
    row = counts[0] if counts else {}
    document["archive"] = {"notes": row.get("notes", 0), "tool_outputs": row.get("tool_outputs", 0), "bytes": row.get("bytes") or 0}
    document["mission"] = _mission_section(mission)
    return document


def _mission_section(mission: Mission) -> dict[str, Any]:
    return sections.mission_item(mission)


def current_document(mission: Mission) -> tuple[dict[str, str], dict[str, bytes]]:
    """The current document as refs, with the contents of the sections not stored yet."""
    ensure_current(mission)
    report = report_of(mission)
    refs = dict(mission.state_refs)
    contents = {refs[name]: text.encode() for name, text in mission.state_pending.items() if name in refs}
    contents.update(mission.__dict__.get("_unstored_parts", {}))
    for name, value in (("mission", _mission_section(mission)), ("archive", report["archived_total"])):
        content = storage.canonical_json(value)
        refs[name] = storage.sha256_hex(content)
        contents[refs[name]] = content
    return dict(sorted(refs.items())), contents
