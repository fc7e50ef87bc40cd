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
from quests.services.section_reads import archive_counts, ledger_rows, section_rows, section_value

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
            apply_ledger(mission, dict(sections.chunks("operations", list(map(sections.operation_item, found)))), whole=True)
            continue
        value = section_value(name, found)
        _set_part(mission, name, value)
        report["kept"][name] = len(value)
        if name == "notes":
            report["archive_due"] = len(found) > settings.QUESTLOG_ACTIVE_NOTES


def _set_part(mission: Mission, name: str, value: Any, *, stored_at_once: bool = False) -> None:
    content = value if isinstance(value, bytes) else storage.canonical_json(value)  # bytes: canonical already
    mission.state_refs[name] = sha = storage.sha256_hex(content)
    if stored_at_once:
        # A ledger chunk is stored as a blob by the writer that made it (`unstored_parts`), not
        # kept on the mission row until a checkpoint: the row would carry the whole ledger.
        mission.state_pending.pop(name, None)
        mission.__dict__.setdefault("_unstored_parts", {})[sha] = content
    else:
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


# The ledger is kept in chunks (checkpoints.sections): a change to one operation rewrites the
# chunk that holds it, a new operation the last chunk, whatever the length of the ledger.


def read_ledger(mission: Mission, operation_id: int | None = None) -> list[dict[str, Any]]:
    """The ledger items a change rewrites: the chunk that holds `operation_id`, or (None: an
    operation about to be planned) the last chunk and what follows it. (The operation ledger's lock
    reads the chunk as stored, in its own statement: `quests.engine.operations`.)"""
    firsts = report_of(mission)["ledger"]
    if operation_id is None:
        first, before = (max(firsts) if firsts else None), None
    else:
        first, before = sections.bounds(firsts, operation_id)
    return list(map(sections.operation_item, ledger_rows(mission.pk, first, before)))


def apply_ledger(mission: Mission, made: dict[str, Any], *, whole: bool = False) -> None:
    """Make the current document hold these ledger chunks ({part name: items, or their canonical
    JSON}), or only them when `whole`."""
    report = report_of(mission)
    if whole:
        for name in [name for name in mission.state_refs if name == "operations" or sections.chunk_of(name)]:
            _drop_part(mission, name)
    for name, value in made.items():
        _set_part(mission, name, value, stored_at_once=True)
    firsts = set() if whole else set(report["ledger"])
    report["ledger"] = sorted(firsts | {chunk[1] for name in made if (chunk := sections.chunk_of(name)) is not None})


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
    record watermark), its defaults filled in: in place, as the checkpoint write updates it."""
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
    document.update(sections.chunks("operations", list(map(sections.operation_item, read["operations"]))))
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
