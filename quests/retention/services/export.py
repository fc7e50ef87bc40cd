"""A person's export of their own data: everything Questlog holds about them, and nothing of
anyone else (staff holds stay with staff)."""

from collections.abc import Callable, Iterator
from itertools import batched
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from checkpoints import sections
from checkpoints.models import Checkpoint, Operation, Record
from checkpoints.services import blobs_get, ledger_expanded
from quests.jsonstream import RawJson, iter_json
from quests.models import AgentToken, AuditEvent, MemoryItem, MemoryProposal, Mission
from quests.schemas import (
    ApprovalOut,
    CheckpointOut,
    ConstraintOut,
    MemoryItemOut,
    MemoryProposalOut,
    MilestoneOut,
    MissionOut,
    OperationOut,
    RecordOut,
    RunOut,
    dump,
)
from quests.services.access import require_person
from quests.services.audit import Actor

# Rows read per round trip: a person's history can be far larger than memory, so it is read a
# chunk at a time as the answer is written, never whole.
EXPORT_ROWS = 200
# Checkpoints (and records) whose stored contents are read in one query: each may hold up to a
# request body's worth of state (a tool's raw output up to 10 MiB), so fewer at a time.
EXPORT_CONTENTS = 20


def account_export(*, actor: Actor) -> Iterator[str]:
    """Everything Questlog holds about this person, and nothing of anyone else: JSON text, a
    chunk at a time. Whether the person may export is checked now; rows are read as the chunks
    are taken. Stored values are written whatever their depth (quests.jsonstream), and a
    checkpoint's stored parts as they are stored, never parsed: no stored data makes it fail."""
    require_person(actor)
    user = actor.user
    document = {
        "format": "questlog-export/1",
        "exported_at": _iso(timezone.now()),
        "user": {
            "username": user.get_username(),
            "email": user.email,
            "first_name": user.first_name,
            "last_name": user.last_name,
            "date_joined": _iso(user.date_joined),
        },
        "missions": _each(Mission.objects.filter(owner=user).order_by("created_at", "id"), _mission_export),
        "memory": {
            "items": _each(MemoryItem.objects.filter(owner=user).order_by("id"), lambda item: _lifecycle(item, dump(MemoryItemOut, item))),
            "proposals": _each(MemoryProposal.objects.filter(owner=user).order_by("id"), lambda p: _lifecycle(p, dump(MemoryProposalOut, p))),
        },
        "agent_tokens": _each(AgentToken.objects.filter(user=user).order_by("id"), _token_export),
    }
    return iter_json(document)


def _each(rows: QuerySet, export: Callable[[Any], Any]) -> Iterator[Any]:
    """Each row's export, the rows read EXPORT_ROWS at a time when the writer reaches them."""
    return (export(row) for row in rows.iterator(chunk_size=EXPORT_ROWS))


def _token_export(token: AgentToken) -> dict[str, Any]:
    return {
        "id": token.pk,
        "name": token.name,
        "prefix": token.prefix,
        "mission_id": token.mission_id,
        "created_at": _iso(token.created_at),
        "last_used_at": _iso(token.last_used_at),
        "revoked_at": _iso(token.revoked_at),
    }


def _iso(value: Any) -> str | None:
    # The export's own fields (tokens, events, activity) spell time as the API's objects do.
    return value.isoformat() if value else None


def _lifecycle(obj: Any, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with the lifecycle fields every kept row has (memory items, proposals, ...)."""
    return {
        **data,
        "lifecycle": {
            "created_at": _iso(obj.created_at),
            "retention_class": obj.retention_class,
            "retention_approved_at": _iso(obj.retention_approved_at),
            "expires_at": _iso(obj.expires_at),
        },
    }


def _mission_export(mission: Mission) -> dict[str, Any]:
    return {
        **_lifecycle(mission, dump(MissionOut, mission)),
        "runs": _each(mission.runs.order_by("number"), lambda run: dump(RunOut, run)),
        "constraints": _each(mission.constraints.order_by("id"), lambda c: _lifecycle(c, dump(ConstraintOut, c))),
        "checkpoints": _checkpoints_export(Checkpoint.objects.filter(mission=mission).with_refs().order_by("seq")),
        "records": _records_export(Record.objects.filter(mission=mission).order_by("id")),
        "ledger": _each(Operation.objects.filter(mission=mission).prefetch_related("events").order_by("id"), _operation_export),
        "approvals": _each(mission.approvals.order_by("id"), lambda a: _lifecycle(a, dump(ApprovalOut, a))),
        "milestones": _each(mission.milestones.order_by("id"), lambda m: _lifecycle(m, dump(MilestoneOut, m))),
        # Staff holds are not the person's data; they stay with staff.
        "activity": _each(AuditEvent.objects.filter(mission=mission).exclude(entity="hold").order_by("id"), _event_export),
    }


def _with_contents(
    rows: QuerySet, hashes: Callable[[Any], list[str]], then: Callable[[Any, dict[str, bytes]], list[str]] | None = None
) -> Iterator[tuple[Any, dict[str, bytes]]]:
    """Each row with the stored contents it refers to, read for EXPORT_CONTENTS rows at once
    (`then`: the contents those name in turn, read for the batch in one more query)."""
    for batch in batched(rows.iterator(chunk_size=EXPORT_ROWS), EXPORT_CONTENTS):
        contents = blobs_get([sha for row in batch for sha in hashes(row)])
        if then is not None:
            contents.update(blobs_get([sha for row in batch for sha in then(row, contents) if sha not in contents]))
        for row in batch:
            yield row, contents


def _checkpoints_export(checkpoints: QuerySet) -> Iterator[dict[str, Any]]:
    for checkpoint, contents in _with_contents(checkpoints, _part_hashes, then=_chunk_hashes):
        state_refs, _ = ledger_expanded(checkpoint.state_refs, contents)
        yield _lifecycle(
            checkpoint,
            {
                **dump(CheckpointOut, checkpoint),
                "state": _stored_parts(state_refs, contents, state=True),
                "agent_state": _stored_parts(checkpoint.agent_state_refs, contents),
            },
        )


def _chunk_hashes(checkpoint: Checkpoint, contents: dict[str, bytes]) -> list[str]:
    """The ledger chunks the checkpoint's groups name (read with the groups' blobs)."""
    groups = sections.ledger_groups(checkpoint.state_refs).values()
    return [sha for group in groups if group in contents for sha in sections.group_chunks(contents[group]).values()]


def _part_hashes(checkpoint: Checkpoint) -> list[str]:
    return [*checkpoint.state_refs.values(), *checkpoint.agent_state_refs.values()]


def _stored_parts(refs: dict[str, str], contents: dict[str, bytes], *, state: bool = False) -> dict[str, RawJson]:
    # Each part is stored as canonical JSON (checkpoints.services.parts): written as it is, a
    # section stored in chunks (the ledger) joined whole again.
    parts = {key: contents[sha] for key, sha in refs.items() if sha in contents}
    return {key: RawJson(content.decode()) for key, content in (sections.merged_raw(parts) if state else parts).items()}


def _records_export(records: QuerySet) -> Iterator[dict[str, Any]]:
    for record, raw in _with_contents(records, lambda r: [r.blob_id] if r.blob_id else []):
        text = raw[record.blob_id].decode(errors="replace") if record.blob_id in raw else None
        yield _lifecycle(record, {**dump(RecordOut, record), "raw_text": text})


def _operation_export(op: Operation) -> dict[str, Any]:
    return _lifecycle(
        op,
        {
            **dump(OperationOut, op),
            "events": [
                {
                    "event": e.event,
                    "external_status": e.external_status or None,
                    "receipt": e.receipt,
                    "error": e.error or None,
                    "created_at": _iso(e.created_at),
                }
                for e in op.events.all()
            ],
        },
    )


def _event_export(e: AuditEvent) -> dict[str, Any]:
    return {
        "created_at": _iso(e.created_at),
        "actor": e.actor,
        "entity": e.entity,
        "entity_id": e.entity_id,
        "action": e.action,
        "from_state": e.from_state,
        "to_state": e.to_state,
    }
