"""What the agent writes during a run: checkpoints of its own state and structured records."""

from typing import Any

from django.conf import settings
from django.db import transaction

from checkpoints.models import Checkpoint, Record, RecordKind
from checkpoints.services import blob_put
from quests.services import idempotency
from quests.services.audit import Actor
from quests.services.errors import InvalidInput
from quests.services.locking import fence, lock_run
from quests.services.savestate import take_checkpoint
from quests.services.snapshots import state_changed


def checkpoint_create(
    *, actor: Actor, run_id: int, agent_state: dict[str, Any], note: str = "", key: str | None = None
) -> tuple[Checkpoint, bool]:
    with transaction.atomic():
        run, mission = lock_run(actor, run_id)
        body = {"agent_state": agent_state, "note": note}
        scope = f"m{mission.pk}:checkpoints"
        replayed = idempotency.replayed_id(owner=mission.owner, scope=scope, key=key, body=body)
        if replayed is not None:
            return Checkpoint.objects.get(pk=replayed), True
        fence(run)
        checkpoint = take_checkpoint(mission, trigger="agent", run=run, agent_state=agent_state, note=note)
        idempotency.remember(owner=mission.owner, scope=scope, key=key, body=body, object_id=checkpoint.pk)
        return checkpoint, False


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
    with transaction.atomic():
        run, mission = lock_run(actor, run_id)
        body = {"kind": kind, "text": text, "data": data, "resolves": resolves}
        scope = f"m{mission.pk}:records"
        replayed = idempotency.replayed_id(owner=mission.owner, scope=scope, key=key, body=body)
        if replayed is not None:
            return Record.objects.get(pk=replayed), True
        fence(run)
        target = None
        if resolves is not None:
            target = Record.objects.filter(mission=mission, pk=resolves, abandoned=False).first()
            if target is None:
                raise InvalidInput("`resolves` must name a record of this mission.", field="resolves")
        record = Record(mission=mission, run=run, kind=kind, data=data, size_bytes=len(text.encode()))
        if kind == RecordKind.TOOL_OUTPUT:
            # Raw output is archived as a content-addressed blob; only a reference and a short
            # preview stay in the active state the next run reads.
            sha, _ = blob_put(text.encode(), media_type="text/plain")
            record.blob_id = sha
            record.archived = True
            record.text = _preview(text)
        else:
            record.text = text
        record.save()
        if target is not None:
            target.resolved = True
            target.resolved_by = record
            target.save(update_fields=["resolved", "resolved_by"])
        idempotency.remember(owner=mission.owner, scope=scope, key=key, body=body, object_id=record.pk)
        state_changed(mission)
        return record, False


def _preview(text: str) -> str:
    limit = settings.QUESTLOG_PREVIEW_CHARS
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
