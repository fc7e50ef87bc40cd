"""What the agent writes during a run: checkpoints of its own state and structured records.

These are the agent's hottest writes, so each is a fixed, small number of round trips whatever
the mission holds: one statement locks the mission (and looks up the idempotency key and takes
the blob writers' lock), then the writes go in one or two round trips (`checkpoints.roundtrip`)."""

from typing import Any

from django.conf import settings
from django.db import transaction

from checkpoints import compaction
from checkpoints.models import Checkpoint, Record, RecordKind
from checkpoints.roundtrip import RoundTrip
from checkpoints.sections import touched
from checkpoints.services import blob_rows, blobs_stage, sha256_hex
from quests.services import idempotency, savestate
from quests.services.audit import Actor
from quests.services.errors import InvalidInput
from quests.services.locking import fence, lock_run
from quests.services.snapshots import state_changed


def _lookup(actor: Actor, suffix: str, key: str | None, body: dict[str, Any]) -> idempotency.Lookup:
    return idempotency.Lookup(owner_id=actor.user.pk if actor.user else 0, suffix=suffix, key=key, body=body)


@idempotency.retried_on_key_race
def checkpoint_create(
    *, actor: Actor, run_id: int, agent_state: dict[str, Any], note: str = "", key: str | None = None
) -> tuple[Checkpoint, bool]:
    lookup = _lookup(actor, "checkpoints", key, {"agent_state": agent_state, "note": note})
    with transaction.atomic():
        run, mission = lock_run(actor, run_id, lookup=lookup, blobs=True, annotations=savestate.head_parts_annotations())
        replayed = lookup.replayed_id()
        if replayed is not None:
            return Checkpoint.objects.get(pk=replayed), True
        trip = RoundTrip()
        fence(run, mission, trip=trip)
        checkpoint = savestate.take_checkpoint(
            mission, trigger="agent", run=run, agent_state=agent_state, note=note, trip=trip, guarded=True,
            stored=savestate.head_parts(run, mission),
        )
        lookup.remember(mission_id=mission.pk, object_id=savestate.checkpoint_id_of(mission, checkpoint.seq), trip=trip)
        trip.run()
        return checkpoint, False


@idempotency.retried_on_key_race
def record_create(
    *,
    actor: Actor,
    run_id: int,
    kind: str,
    text: str,
    data: dict[str, Any] | None = None,
    resolves: int | None = None,
    key: str | None = None,
) -> tuple[Record, bool]:
    if kind not in RecordKind.values:
        raise InvalidInput(f"Unknown record kind “{kind}”.", field="kind")
    lookup = _lookup(actor, "records", key, {"kind": kind, "text": text, "data": data, "resolves": resolves})
    with transaction.atomic():
        run, mission = lock_run(actor, run_id, lookup=lookup, blobs=kind == RecordKind.TOOL_OUTPUT)
        replayed = lookup.replayed_id()
        if replayed is not None:
            return Record.objects.get(pk=replayed), True
        fence_trip = RoundTrip()
        fence(run, mission, trip=fence_trip)
        savestate.ensure_current(mission)
        record = Record(mission=mission, run=run, kind=kind, data=data, size_bytes=len(text.encode()))
        # First round trip: the record, the resolution, and the sections they change, read back.
        first = RoundTrip()
        if kind == RecordKind.TOOL_OUTPUT:
            # Raw output is archived as a content-addressed blob; only a reference and a short
            # preview stay in the active state the next run reads.
            content = text.encode()
            record.blob_id = sha256_hex(content)
            record.archived = True
            record.text = compaction.preview(text, settings.QUESTLOG_PREVIEW_CHARS)
            blobs_stage(first, blob_rows({record.blob_id: content}, media_type="text/plain"))
        else:
            record.text = text
        resolution = None
        if resolves is not None:
            # Before the insert, so a record cannot resolve itself.
            resolution = first.update(Record.objects.filter(mission=mission, pk=resolves, abandoned=False), resolved=True)
        first.insert(record)
        change = savestate.record_change(kind, resolves=resolves is not None)
        sections = savestate.read_sections(first, mission.pk, touched(change))
        first.run()
        if resolution is not None and resolution.count == 0:
            # Nothing is kept: the transaction rolls back with the error.
            raise InvalidInput("`resolves` must name a record of this mission.", field="resolves")
        savestate.apply_sections(mission, sections)
        savestate.record_added(mission, record)
        # Second round trip: who resolved it, the key, the heartbeat, the current document.
        second = fence_trip
        if resolves is not None:
            second.update(Record.objects.filter(pk=resolves), resolved_by=record.pk)
        lookup.remember(mission_id=mission.pk, object_id=record.pk, trip=second)
        state_changed(mission, change, applied=True, trip=second)
        second.run()
        return record, False
