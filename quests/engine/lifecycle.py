"""The engine's named operations on a mission's lifecycle: create a mission, end a run. (Run start
is `writes.run_start`.) Each is one statement on PostgreSQL, whatever the number of constraints
or audit events (arrays, unnested); the caller holds Django's transaction (`transaction.atomic`)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quests.engine import runner
from quests.engine.sql import lifecycle as lifecycle_sql
from quests.models import AuditEvent, Mission, Run


@dataclass(frozen=True)
class Created:
    """What `mission_create` did: the new mission's id and its constraints' ids (in the order
    given), or, when the key had already made a mission, that mission (`replay`, as the lock's
    lookup gives it to `idempotency.replayed`) and nothing new."""

    mission_id: int | None
    constraint_ids: list[int]
    replay: tuple[int | None, str | None]


def mission_create(
    mission: Mission,
    *,
    constraint_texts: list[str],
    constraint_source: str,
    created: AuditEvent,
    key_scope: str,
    key: str | None,
    request_hash: str,
) -> Created:
    """Unless `key` already made a mission: insert `mission` (unsaved, its fields as the model
    defaults them, with its current document as the service made it), its constraints, the audit
    events (`created`, the mission's own, then one per constraint: added, with its text) and the
    key. The actor of every event is `created`'s."""
    params: dict[str, Any] = {
        "now": mission.created_at,
        "retention_class": mission.retention_class,
        "owner_id": mission.owner_id,
        "title": mission.title,
        "objective": mission.objective,
        "status": mission.status,
        "planned_milestones": runner.json_text(mission.planned_milestones),
        "state_refs": runner.json_text(mission.state_refs),
        "state_pending": runner.json_text(mission.state_pending),
        "state_report": runner.json_text(mission.state_report),
        "source": constraint_source,
        "actor_user_id": created.actor_user_id,
        "actor_token_id": created.actor_token_id,
        "actor": created.actor,
        "key_scope": key_scope,
        "key": key,
        "request_hash": request_hash,
    }
    if runner.is_postgresql():
        ((mission_id, constraint_ids, earlier_id, earlier_hash),) = runner.fetch(
            lifecycle_sql.MISSION_CREATE_PG, {**params, "constraint_texts": constraint_texts}
        )
        return Created(mission_id=mission_id, constraint_ids=list(constraint_ids or []), replay=(earlier_id, earlier_hash))
    _, insert, add, audited, remember = lifecycle_sql.MISSION_CREATE_SQLITE
    earlier = mission_key_earlier(mission.owner_id, key_scope, key)
    if earlier[0] is not None:
        return Created(mission_id=None, constraint_ids=[], replay=earlier)
    ((((mission_id,),), _),) = runner.steps([(insert, params)])
    after = {**params, "mission_id": mission_id}
    added = runner.steps([(add, {**after, "text": text}) for text in constraint_texts])
    constraint_ids = [rows[0][0] for rows, _ in added]
    events: list[tuple[str, int | None, str, str, dict[str, str]]] = [("mission", None, "create", mission.status, {})] + [
        ("constraint", pk, "add", "active", {"text": text}) for pk, text in zip(constraint_ids, constraint_texts)
    ]
    runner.steps(
        [
            (audited, {**after, "entity": entity, "entity_id": pk, "action": action, "from_state": "", "to_state": to, "data": runner.json_text(data)})
            for entity, pk, action, to, data in events
        ]
        + ([(remember, after)] if key else [])
    )
    return Created(mission_id=mission_id, constraint_ids=constraint_ids, replay=(None, None))


def mission_key_earlier(owner_id: int, key_scope: str, key: str | None) -> tuple[int | None, str | None]:
    """What `key` already made, alone (for a create refused before it writes)."""
    if not key:
        return None, None
    rows = runner.fetch(lifecycle_sql.MISSION_CREATE_EARLIER, {"owner_id": owner_id, "key_scope": key_scope, "key": key})
    return (rows[0][0], rows[0][1]) if rows else (None, None)


def run_end(run: Run, mission: Mission, events: list[AuditEvent], *, now: datetime) -> None:
    """Write `run` as ended and its locked `mission` as the state machine moved it (both in
    memory), clearing the mission's active run if it was this one, and the `events` of both
    moves: one statement on PostgreSQL."""
    first = events[0]
    params: dict[str, Any] = {
        "now": now,
        "run_id": run.pk,
        "ended_at": run.ended_at,
        "stop_reason": run.stop_reason,
        "stop_detail": run.stop_detail,
        "mission_id": mission.pk,
        "status": mission.status,
        "mission_stop_reason": mission.stop_reason,
        "mission_stop_detail": mission.stop_detail,
        "retry_at": mission.retry_at,
        "mission_ended_at": mission.ended_at,
        "expires_at": mission.expires_at,
        "state_version": mission.state_version,
        "actor_user_id": first.actor_user_id,
        "actor_token_id": first.actor_token_id,
        "actor": first.actor,
    }
    if runner.is_postgresql():
        runner.fetch(
            lifecycle_sql.RUN_END_PG,
            {
                **params,
                **runner.audit_event_arrays(events),
            },
        )
        return
    ended, moved, audited = lifecycle_sql.RUN_END_SQLITE
    runner.steps(
        [(ended, params), (moved, params)]
        + [
            (
                audited,
                {
                    **params,
                    "actor_user_id": e.actor_user_id,
                    "actor_token_id": e.actor_token_id,
                    "actor": e.actor,
                    "entity": e.entity,
                    "entity_id": e.entity_id,
                    "action": e.action,
                    "from_state": e.from_state,
                    "to_state": e.to_state,
                    "data": runner.json_text(e.data),
                },
            )
            for e in events
        ]
    )


def stamp_working_state(mission_id: int) -> bool:
    """Copy the mission's expiry onto every row of its working state, its row locked first: one
    statement (PostgreSQL). Says whether the mission was there."""
    ((found,),) = runner.fetch(lifecycle_sql.STAMP_WORKING_STATE_PG, {"mission_id": mission_id})
    return found > 0
