"""What the agent writes during a run: checkpoints of its own state and structured records.

These are the agent's hottest writes, so each is a fixed, small number of statements whatever the
mission holds, each one of the storage engine's (quests.engine): one locks the mission (and looks
up the idempotency key and takes the blob writers' lock), then the writes follow."""

from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import transaction

from checkpoints import compaction, services as storage
from checkpoints.models import Checkpoint, Record, RecordKind
from checkpoints.sections import RECORD_SECTIONS, touched
from checkpoints.services import sha256_hex
from quests.engine import checkpoints as engine_checkpoints, writes
from quests.services import checkpointing, idempotency, locking, savestate, section_reads, tokens
from quests.services.audit import Actor
from quests.services.errors import InvalidInput, NotFound
from quests.services.snapshots import state_changed


@idempotency.retried_on_key_race
def checkpoint_create(
    *, actor: Actor | writes.Credentials, run_id: int, agent_state: dict[str, Any], note: str = "", key: str | None = None
) -> tuple[Checkpoint, bool]:
    """The agent's checkpoint: authenticate, read, replay on key, fence, write, answer. On
    PostgreSQL, when this process wrote the run's last checkpoint for the same caller, one
    statement does it all (`_checkpoint_known`); else two, neither in a transaction of its own:
    the first authenticates the caller (an agent token's `Credentials`, or an actor) and reads
    without a lock; the second writes only if the mission row is still as read. When it moved
    (another writer went first), the locked path writes instead."""
    parts = checkpointing.agent_parts_of(agent_state)
    keyed = checkpoint_keyed(key, parts, note)
    who = tokens.who_calls(actor)
    known = engine_checkpoints.known_take(who, run_id)
    checkpoint, counted = _checkpoint_known(who, run_id, known, parts, note, keyed) if known else (None, False)
    if checkpoint is not None:
        return checkpoint, False
    seen = tokens.statement_caller(actor, lambda who, count: engine_checkpoints.checkpoint_read(who, run_id, keyed, count), counted=counted)
    use_due = tokens.use_to_note(seen)
    locked = seen.locked
    if locked is None or seen.claim is None or idempotency.replayed(keyed, locked.replay) is not None:
        tokens.token_used(use_due)
        return _checkpoint_locked(seen.caller, run_id, agent_parts=parts, note=note, keyed=keyed)
    locking.refuse_unless_active(locked.run, locked.mission)
    checkpoint = checkpointing.take_agent_checkpoint(locked, agent_parts=parts, note=note, key=keyed, claim=replace(seen.claim, used_token_id=use_due))
    if checkpoint is not None:
        _known_after(who, run_id, seen, checkpoint, parts, use_due)
        return checkpoint, False
    tokens.token_used(use_due)
    return _checkpoint_locked(seen.caller, run_id, agent_parts=parts, note=note, keyed=keyed)


def _checkpoint_known(
    who: writes.Caller | writes.Credentials, run_id: int, known: engine_checkpoints.Known, parts: checkpointing.AgentParts, note: str, keyed: writes.Key
) -> tuple[Checkpoint | None, bool]:
    """The checkpoint in one statement, on the mission row as this process's last write left it:
    (the checkpoint, or None when the row moved, the key made something already, or the caller
    may no longer write there, and nothing was written; whether the request was counted)."""
    seen, locked = known.seen, known.locked
    use_due = tokens.use_to_note(seen)

    def write(count: writes.Count | None, rate: int) -> Checkpoint | None:
        claim = engine_checkpoints.Claim(mission_seen=known.mission_after, checkpoint_id=None, used_token_id=use_due, who=who, count=count, rate=rate)
        return checkpointing.take_agent_checkpoint(locked, agent_parts=parts, note=note, key=keyed, claim=claim)

    checkpoint, counted = tokens.counted_with(who, write)
    if checkpoint is not None:
        _known_after(who, run_id, seen, checkpoint, parts, use_due)
    return checkpoint, counted


def _known_after(
    who: writes.Caller | writes.Credentials,
    run_id: int,
    seen: engine_checkpoints.Seen,
    checkpoint: Checkpoint,
    parts: checkpointing.AgentParts,
    used: int | None,
) -> None:
    """Keep the run's mission as the claimed write left it, for the next checkpoint's one statement."""
    known = checkpointing.known_after(seen, checkpoint, parts[0], used)
    if known is not None:
        engine_checkpoints.known_keep(who, run_id, known)


def checkpoint_keyed(key: str | None, parts: checkpointing.AgentParts, note: str) -> writes.Key:
    """The checkpoint's idempotency key, its body hash made from the state's parts: the state is
    serialised once (the same bytes as the canonical JSON of {"agent_state": …, "note": …})."""
    body = b'{"agent_state":' + storage.joined(parts[0], parts[1]) + b',"note":' + storage.canonical_json(note) + b"}"
    return idempotency.keyed_canonical("checkpoints", key, body)


def _checkpoint_locked(caller: writes.Caller, run_id: int, *, agent_parts: checkpointing.AgentParts, note: str, keyed: writes.Key) -> tuple[Checkpoint, bool]:
    """The agent's checkpoint under its mission's row lock: for a replay, a refusal, SQLite, and
    the rare write whose mission moved after it was read."""
    with transaction.atomic():
        locked = writes.lock_run(caller, run_id, keyed)
        if locked is None:
            raise NotFound(f"No run with id {run_id}.")
        replayed = idempotency.replayed(keyed, locked.replay)
        if replayed is not None:
            return Checkpoint.objects.get(pk=replayed), True
        locking.refuse_unless_active(locked.run, locked.mission)
        checkpoint = checkpointing.take_agent_checkpoint(locked, agent_parts=agent_parts, note=note, key=keyed)
        assert checkpoint is not None
        return checkpoint, False


@idempotency.retried_on_key_race
def record_create(
    *,
    actor: Actor | writes.Credentials,
    run_id: int,
    kind: str,
    text: str,
    data: dict[str, Any] | None = None,
    resolves: int | None = None,
    key: str | None = None,
) -> tuple[Record, bool]:
    """A record: authenticate and lock (an agent token's `Credentials` are checked by the lock's
    own statement: `tokens.run_locked_for`), replay on key, fence, write the record (on
    PostgreSQL the same statement reads its section as it was: `writes.record_write`), make its
    section, save the state (with the key) — three statements in the transaction."""
    if kind not in RecordKind.values:
        raise InvalidInput(f"Unknown record kind “{kind}”.", field="kind")
    keyed = idempotency.keyed("records", key, {"kind": kind, "text": text, "data": data, "resolves": resolves})
    with transaction.atomic():
        _, locked = tokens.run_locked_for(actor, run_id, keyed)
        replayed = idempotency.replayed(keyed, locked.replay)
        if replayed is not None:
            return Record.objects.get(pk=replayed), True
        run, mission = locked.run, locked.mission
        locking.refuse_unless_active(run, mission)
        savestate.ensure_current(mission)
        record = Record(mission=mission, run=run, kind=kind, data=data, size_bytes=len(text.encode()), text=text)
        blob = None
        if kind == RecordKind.TOOL_OUTPUT:
            # Raw output is archived as a content-addressed blob; only a reference and a short
            # preview stay in the active state the next run reads.
            content = text.encode()
            blob = (sha256_hex(content), content)
            record.blob_id, record.archived = blob[0], True
            record.text = compaction.preview(text, settings.QUESTLOG_PREVIEW_CHARS)
        window, unarchived_only = section_reads.record_window(kind)
        written = writes.record_write(
            writes.RecordRow(
                mission_id=mission.pk,
                run_id=run.pk,
                kind=kind,
                text=record.text,
                data=data,
                size_bytes=record.size_bytes,
                resolves=resolves,
                archived=record.archived,
                blob=blob,
            ),
            window=window,
            unarchived_only=unarchived_only,
        )
        record.pk, record.created_at = written.id, written.created_at
        if resolves is not None and not written.resolved_found:
            # Nothing is kept: the transaction rolls back with the error.
            raise InvalidInput("`resolves` must name a record of this mission.", field="resolves")
        record._state.adding = False
        change = savestate.record_change(kind, resolves=resolves is not None)
        if written.window_before is not None:
            # Its section as read with the write, and the record added: no read of its own.
            savestate.apply_sections(mission, {RECORD_SECTIONS[kind]: section_reads.record_rows_after(record, written.data, written.window_before)})
        else:
            savestate.sections_refresh(mission, touched(change))
        savestate.record_added(mission, record)
        state_changed(mission, change, applied=True, key=keyed, made_id=record.pk, resolves=resolves)
        return record, False
