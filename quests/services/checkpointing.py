"""A mission's save state written as a checkpoint: the current document (`quests.services.savestate`)
as refs, the agent's state as content-addressed parts, the compaction report, and a notes archive
when one is due. Every checkpoint, whatever its trigger, is written by `_write` through the storage
engine's one statement (`quests.engine.checkpoints.checkpoint_write`): under the mission's lock
(`take_checkpoint`), as the agent's own checkpoint (`take_agent_checkpoint`: under the lock, or as
the compare-and-set on the row as read or as this process left it), or as a system checkpoint only
when the state changed (`take_checkpoint_if_changed`)."""

from collections.abc import Set as AbstractSet
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from checkpoints import compaction, refmaps, sections, services as storage
from checkpoints.models import Checkpoint, Trigger
from checkpoints.pruning import blob_writers_guard
from quests.engine import checkpoints as ckpts, writes
from quests.models import Mission, Run
from quests.services.locking import named_now
from quests.services.savestate import DURABLE_SECTIONS, current_document, ensure_current, report_of, sections_refresh, unstored_parts

# An agent state as its parts: {key: sha256}, {sha256: canonical JSON}, and its size in bytes.
AgentParts = tuple[dict[str, str], dict[str, bytes], int]


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
    changed: str | None = None,
) -> Checkpoint:
    """Write a checkpoint of the mission (whose row the caller holds locked) and move its head.

    It copies the current document (a stop changes the mission row, which the `mission` section is
    made from when the checkpoint is written). An approval's or a milestone's checkpoint names the
    kind of change it follows (`changed`, of `checkpoints.sections.CHANGES`), whose sections are
    refreshed first; a restore, which sets records aside, reads every section and recounts the
    archive. The write is the engine's one statement (`ckpts.checkpoint_write`): it also beats `run`
    (`beat`). The agent's own checkpoint, keyed and on the head's layout, is `take_agent_checkpoint`."""
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
    )
    assert checkpoint is not None  # written under the mission's lock: nothing can have moved
    return checkpoint


def take_agent_checkpoint(locked: writes.Locked, *, agent_parts: AgentParts, note: str, key: writes.Key, claim: ckpts.Claim | None = None) -> Checkpoint | None:
    """The agent's checkpoint of its run's mission as `locked` read it, on the head's stored parts
    and layout, beating the run: under the mission's row lock (no `claim`: always written), or read
    without it (`claim`: written only if the row is still as read, else None)."""
    checkpoint = _write(
        locked.mission,
        trigger=Trigger.AGENT,
        run=locked.run,
        agent_parts=agent_parts,
        note=note,
        guarded=True,
        stored=locked.head_parts(),
        beat=True,
        key=key,
        claim=claim,
        head_layout=locked.head_layout(),
    )
    assert checkpoint is not None or claim is not None  # under the lock nothing can have moved
    return checkpoint


def known_after(seen: ckpts.Seen, checkpoint: Checkpoint, refs: dict[str, str], used: int | None) -> ckpts.Known | None:
    """The mission as the claimed write of the agent's `checkpoint` (whose agent-state refs are
    `refs`) left it, for the next checkpoint's one statement (`ckpts.Known`); None when the write
    did not say. `used`: the token whose use the write noted."""
    locked = seen.locked
    if checkpoint.mission_after is None or locked is None:
        return None
    locked.head_written(checkpoint.pk, refs, checkpoint.agent_layout, checkpoint.agent_state_bytes)
    if used is not None:
        seen.token_last_used_at = checkpoint.created_at
    return ckpts.Known(seen=seen, mission_after=checkpoint.mission_after)


def take_checkpoint_if_changed(mission: Mission, *, trigger: str) -> Checkpoint | None:
    """A system checkpoint carrying the head's agent state, unless its content hash would equal
    the head's: then nothing is written (a snapshot of unchanged state is no snapshot)."""
    archived = _notes_archive(mission) if report_of(mission)["archive_due"] else None
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
        if (seen := _head_agent_seen(mission)) is not None:
            return seen.refs, {}, seen.size
        head = head_of(mission)
        return (dict(head.agent_state_refs), {}, head.agent_state_bytes) if head else ({}, {}, 0)
    return agent_parts_of(agent_state)


def _head_agent_seen(mission: Mission) -> writes.HeadAgent | None:
    """The head's agent state as the run's lock read it (`Mission.locked_by`), while the head is
    still that one; else None (the head is read)."""
    return mission.locked_by.head_agent() if mission.locked_by is not None else None


def _head_layout(mission: Mission) -> refmaps.AgentLayout | None:
    """How the head stores its agent refs (the layout a carried-over state keeps), as the run's
    lock read it or from the head; None without a head."""
    if (seen := _head_agent_seen(mission)) is not None:
        return seen.layout
    head = head_of(mission)
    return head.agent_layout if head else None


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
    if not (guarded or mission.blobs_guarded):  # the run's lock may have taken it (`Mission.blobs_guarded`)
        blob_writers_guard()
    if archived is None and report_of(mission)["archive_due"]:
        archived = _notes_archive(mission)
    refs, contents = current_document(mission)
    report = report_of(mission)
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
    agent_layout = refmaps.agent_layout(agent_refs, _head_layout(mission) if carried else head_layout)
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
    checkpoint.also_answered = written.more
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
    report = report_of(mission)
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
