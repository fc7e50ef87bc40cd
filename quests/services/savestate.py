# Over 400 lines, kept whole: keeping the current document, applying sections and writing it as a checkpoint share this module's private parts (the report, the current document, the agent side, the mission's unstored parts); a split would make them public to three modules. The ledger chunks and the checkpoint write are the cut when it is made.
"""A mission's save state: its state document, kept current section by section, and written as
checkpoints.

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

from collections.abc import Iterable, Set as AbstractSet
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Max

from checkpoints import compaction, refmaps, sections, services as storage
from checkpoints.models import Checkpoint, Operation, Record, RecordKind, Trigger
from checkpoints.pruning import blob_writers_guard
from quests.engine import checkpoints as ckpts, writes
from quests.models import Mission, Run
from quests.services.locking import named_now
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
# An agent state as its parts: {key: sha256}, {sha256: canonical JSON}, and its size in bytes.
AgentParts = tuple[dict[str, str], dict[str, bytes], int]
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
    report = _report(mission)
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
    _report(mission)["sizes"][name] = len(content)


def unstored_parts(mission: Mission) -> dict[str, bytes]:
    """The parts made in this transaction that the current document refers to and no row holds:
    the caller stores them as blobs ({sha256: content}) with the mission row's update, under the
    blob writers' lock (the collector counts the current documents' refs as references)."""
    return mission.__dict__.pop("_unstored_parts", {})


def _drop_part(mission: Mission, name: str) -> None:
    for kept in (mission.state_refs, mission.state_pending, _report(mission)["sizes"]):
        kept.pop(name, None)


# The ledger is kept in chunks (checkpoints.sections): a change to one operation rewrites the
# chunk that holds it, a new operation the last chunk, whatever the length of the ledger.


def read_ledger(mission: Mission, operation_id: int | None = None) -> list[dict[str, Any]]:
    """The ledger items a change rewrites: the chunk that holds `operation_id`, or (None: an
    operation about to be planned) the last chunk and what follows it. (The operation ledger's lock
    reads the chunk as stored, in its own statement: `quests.engine.operations`.)"""
    firsts = _report(mission)["ledger"]
    if operation_id is None:
        first, before = (max(firsts) if firsts else None), None
    else:
        first, before = sections.bounds(firsts, operation_id)
    return list(map(sections.operation_item, ledger_rows(mission.pk, first, before)))


def apply_ledger(mission: Mission, made: dict[str, Any], *, whole: bool = False) -> None:
    """Make the current document hold these ledger chunks ({part name: items, or their canonical
    JSON}), or only them when `whole`."""
    report = _report(mission)
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
        _report(mission)["format"] = sections.FORMAT
    if counts is not None:
        row = counts[0] if counts else {}
        report = _report(mission)
        report["archived_total"] = {"notes": row.get("notes", 0), "tool_outputs": row.get("tool_outputs", 0), "bytes": row.get("bytes") or 0}
        report["watermark"] = Record.objects.filter(mission_id=mission.pk).aggregate(m=Max("pk"))["m"] or 0


def new_mission_document(mission: Mission, constraints: list[dict[str, Any]]) -> None:
    """The current document of a mission just created, made without reading its tables: every
    section empty but its constraints (rows as `section_rows` reads them), nothing archived. It
    is what `sections_refresh(recount=True)` would read back."""
    mission.state_refs, mission.state_pending, mission.state_report = {}, {}, {}
    apply_sections(mission, {name: constraints if name == "constraints" else [] for name in SECTIONS})
    _report(mission)["format"] = sections.FORMAT


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
    report = _report(mission)
    report["watermark"] = max(report["watermark"], record.pk)
    if record.kind == RecordKind.TOOL_OUTPUT:
        for counter in (report["archived_total"], report["since"]):
            counter["tool_outputs"] += 1
            counter["bytes"] += record.size_bytes


def _report(mission: Mission) -> dict[str, Any]:
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
    report = _report(mission)
    refs = dict(mission.state_refs)
    contents = {refs[name]: text.encode() for name, text in mission.state_pending.items() if name in refs}
    contents.update(mission.__dict__.get("_unstored_parts", {}))
    for name, value in (("mission", _mission_section(mission)), ("archive", report["archived_total"])):
        content = storage.canonical_json(value)
        refs[name] = storage.sha256_hex(content)
        contents[refs[name]] = content
    return dict(sorted(refs.items())), contents


# --- Checkpoints ------------------------------------------------------------------------------------


def take_checkpoint(
    mission: Mission,
    *,
    trigger: str,
    run: Run | None = None,
    agent_state: dict[str, Any] | None = None,
    agent_parts: AgentParts | None = None,
    note: str = "",
    guarded: bool = False,
    stored: AbstractSet[str] = frozenset(),
    beat: bool = False,
    key: writes.Key | None = None,
    head_layout: refmaps.AgentLayout | None = None,
    changed: str | None = None,
) -> Checkpoint:
    """Write a checkpoint of the mission (whose row the caller holds locked) and move its head.

    It copies the current document (a stop changes the mission row, which the `mission` section is
    made from when the checkpoint is written). An approval's or a milestone's checkpoint names the
    kind of change it follows (`changed`, of `checkpoints.sections.CHANGES`), whose sections are
    refreshed first; a restore, which sets records aside, reads every section and recounts the
    archive. The write is the engine's one statement (`ckpts.checkpoint_write`): it also beats `run`
    (`beat`), remembers the idempotency `key`, and puts the agent refs on the head's base (`head_layout`)."""
    if trigger == Trigger.RESTORE:
        sections_refresh(mission, recount=True)
    elif changed is not None and not ensure_current(mission):
        sections_refresh(mission, sections.touched(changed))
    checkpoint = _write(
        mission,
        trigger=trigger,
        run=run,
        agent_state=agent_state,
        agent_parts=agent_parts,
        note=note,
        guarded=guarded,
        stored=stored,
        beat=beat,
        key=key,
        head_layout=head_layout,
    )
    assert checkpoint is not None  # written under the mission's lock: nothing can have moved
    return checkpoint


def take_checkpoint_unless_moved(seen: writes.Locked, *, agent_parts: AgentParts, note: str, key: writes.Key, claim: ckpts.Claim) -> Checkpoint | None:
    """The agent's checkpoint of a mission read without its lock (`seen`): written only if the row is still as read, else None."""
    return _write(
        seen.mission,
        trigger=Trigger.AGENT,
        run=seen.run,
        agent_parts=agent_parts,
        note=note,
        guarded=True,
        stored=seen.head_parts(),
        beat=True,
        key=key,
        claim=claim,
        head_layout=seen.head_layout(),
    )


def take_checkpoint_if_changed(mission: Mission, *, trigger: str) -> Checkpoint | None:
    """A system checkpoint carrying the head's agent state, unless its content hash would equal
    the head's: then nothing is written (a snapshot of unchanged state is no snapshot)."""
    archived = _notes_archive(mission) if _report(mission)["archive_due"] else None
    head = head_of(mission)
    if head is not None and not (archived and archived.note_ids):
        refs, _ = current_document(mission)
        if storage.document_hash(refs, head.agent_state_refs) == head.hash:
            return None
    return _write(mission, trigger=trigger, archived=archived)


def head_of(mission: Mission) -> Checkpoint | None:
    """The mission's head checkpoint as its locked row names it now."""
    return named_now(mission, "head_checkpoint", Checkpoint.objects.with_refs())


def _agent_side(mission: Mission, agent_state: dict[str, Any] | None, agent_parts: AgentParts | None) -> AgentParts:
    """The agent state's refs, the contents that may be new, and its size. With neither a state
    nor its parts, the head's agent state is carried over by reference (the system's checkpoints)."""
    if agent_parts is not None:
        return agent_parts
    if agent_state is None:
        head = head_of(mission)
        return (dict(head.agent_state_refs), {}, head.agent_state_bytes) if head else ({}, {}, 0)
    return agent_parts_of(agent_state)


def agent_parts_of(agent_state: dict[str, Any]) -> AgentParts:
    """An agent state split into its content-addressed parts, with its size."""
    refs, contents = storage.parts(agent_state)
    return refs, contents, sum(len(contents[sha]) for sha in refs.values())


def _write(
    mission: Mission,
    *,
    trigger: str,
    run: Run | None = None,
    agent_state: dict[str, Any] | None = None,
    agent_parts: AgentParts | None = None,
    note: str = "",
    guarded: bool = False,
    archived: "compaction.Archived | None" = None,
    stored: AbstractSet[str] = frozenset(),
    beat: bool = False,
    key: writes.Key | None = None,
    claim: ckpts.Claim | None = None,
    head_layout: refmaps.AgentLayout | None = None,
) -> Checkpoint | None:
    if not guarded:
        blob_writers_guard()
    if archived is None and _report(mission)["archive_due"]:
        if claim is not None and claim.who is not None:
            return None  # the one-statement write carries no notes' archive: the two-trip write does
        archived = _notes_archive(mission)
    refs, contents = current_document(mission)
    report = _report(mission)
    sizes = {**report["sizes"], **{name: len(contents[sha]) for name, sha in refs.items() if name in ("mission", "archive")}}
    compaction_report = compaction.report(
        archived=archived or compaction.NOTHING_ARCHIVED,
        tool_outputs=(report["since"]["tool_outputs"], report["since"]["bytes"]),
        total=report["archived_total"],
        kept=_kept(report),
        note_cutoff=report["note_cutoff"],
    )
    agent_refs, agent_contents, agent_size = _agent_side(mission, agent_state, agent_parts)
    carried = head_layout is None and agent_state is None and agent_parts is None  # the head's agent state (no head: a new base)
    agent_layout = refmaps.agent_layout(agent_refs, head.agent_layout if carried and (head := head_of(mission)) else head_layout)
    unstored_parts(mission)  # stored with the checkpoint's blobs (they are in `contents`)
    report["since"] = {"tool_outputs": 0, "bytes": 0}
    report["archive_due"] = False
    row = ckpts.CheckpointRow(
        mission_id=mission.pk,
        run_id=run.pk if run else None,
        parent_id=mission.head_checkpoint_id,
        seq=mission.next_checkpoint_seq,
        trigger=trigger,
        hash=storage.document_hash(refs, agent_refs),
        note=note,
        state_refs=refs,
        agent_layout=agent_layout,
        record_watermark=report["watermark"],
        size_bytes=sum(sizes.get(name, 0) for name in refs) + agent_size,
        agent_state_bytes=agent_size,
        compaction_report=compaction_report,
        # Blobs the caller knows exist (the head's parts) are not sent again.
        blobs={sha: content for sha, content in {**contents, **agent_contents}.items() if sha not in stored},
        archived_blobs={blob.sha256: bytes(blob.data) for blob in archived.blobs} if archived else {},
        archived_previews=archived.previews if archived else {},
        mission_state_refs=mission.state_refs,
        mission_state_report=mission.state_report,
    )
    written = ckpts.checkpoint_write(row, beat_run_id=run.pk if beat and run else None, key=key, key_owner_id=mission.owner_id, claim=claim)
    if written is None:
        return None
    checkpoint = Checkpoint(
        id=written.id,
        created_at=written.created_at,
        mission_id=mission.pk,
        run_id=row.run_id,
        parent_id=row.parent_id,
        seq=row.seq,
        trigger=trigger,
        hash=row.hash,
        note=note,
        record_watermark=row.record_watermark,
        size_bytes=row.size_bytes,
        agent_state_bytes=agent_size,
        new_bytes=written.new_bytes,
    )
    checkpoint.state_refs, checkpoint.agent_layout = refs, agent_layout  # known: nothing to read again
    checkpoint.compaction_report, checkpoint.mission_after = compaction_report, written.mission_after
    checkpoint.maps_to_store()  # stored by the write
    checkpoint._state.adding, checkpoint._state.db = False, DEFAULT_DB_ALIAS
    if beat and run:
        run.heartbeat_at = written.created_at
    mission.state_pending = {}
    mission.head_checkpoint = checkpoint
    mission.next_checkpoint_seq = row.seq + 1
    mission.updated_at = written.created_at
    return checkpoint


def _kept(report: dict[str, Any]) -> dict[str, int]:
    kept = report["kept"]
    return {name: kept.get(name, 0) for name in ("notes", "tool_outputs", *DURABLE_SECTIONS.values(), "constraints", "approvals")}


def _notes_archive(mission: Mission) -> "compaction.Archived":
    """Move live notes older than the newest N to blobs (the notes section never held them)."""
    report = _report(mission)
    archived = compaction.notes_archive(
        mission_id=mission.pk,
        keep=settings.QUESTLOG_ACTIVE_NOTES,
        preview_chars=settings.QUESTLOG_PREVIEW_CHARS,
        since_cutoff=int(report["note_cutoff"]),
    )
    total = report["archived_total"]
    total["notes"] += len(archived.note_ids)
    total["bytes"] += archived.note_bytes
    report["note_cutoff"] = archived.note_cutoff
    return archived
