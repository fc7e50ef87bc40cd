"""The engine's named operations on the operation ledger: lock what a call changes (one statement,
which also reads the ledger chunk the change rewrites), then write the change with everything that
goes with it (one statement on PostgreSQL). The caller holds Django's transaction."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.models import Operation
from checkpoints.pruning import BLOB_GC_LOCK
from checkpoints.sections import NO_LEDGER, PAST_EVERY_ID, LedgerChunk
from quests.engine import runner
from quests.engine.checkpoints import LockedFor, locked_as
from quests.engine.sql import ledger as ledger_sql
from quests.engine.writes import Caller, Count, Credentials, StateSave
from quests.models import AuditEvent, Mission, Run

_RUN_WIDTH = len(Run._meta.concrete_fields)
_MISSION_WIDTH = len(Mission._meta.concrete_fields)
_OPERATION_WIDTH = len(Operation._meta.concrete_fields)


@dataclass
class LockedOperation:
    """What `lock_operation` read under the mission's lock: the mission, the operation (current),
    the receipts it holds, and the stored ledger chunk its change rewrites (None: the mission's
    current document does not hold it; the caller rebuilds it)."""

    mission: Mission
    operation: Operation
    receipts_held: int
    ledger: LedgerChunk | None


@dataclass
class LockedPlan:
    """What `lock_plan` read under the mission's lock: the run, its mission, the operation already
    planned with the key (or None, and then the id the new one takes), and the last ledger chunk
    as stored (None: as `LockedOperation.ledger`)."""

    run: Run
    mission: Mission
    earlier: Operation | None
    new_id: int | None
    ledger: LedgerChunk | None


def _fresh_rows(statement_pg: str, statement_sqlite: str, params: dict[str, Any], fresh_at: int) -> list[tuple]:
    """The lock's rows. On PostgreSQL a lock that waited read the ledger as it was before the
    other writer committed (`read_fresh` is false): holding the lock now, it reads again."""
    if not runner.is_postgresql():
        return runner.fetch(statement_sqlite, params)
    while True:
        rows = runner.fetch(statement_pg, {**params, "blob_gc_lock": BLOB_GC_LOCK})
        if not rows or rows[0][fresh_at]:
            return rows


def _ledger(group_first: int | None, group: bytes | memoryview | None, first: int | None, content: bytes | memoryview | None) -> LedgerChunk | None:
    """The stored chunk and group the lock read (`ledger_sql._ledger_chunk`'s four columns); None
    when the document names a group or chunk whose blob is not there (a document the caller must
    make again)."""
    if group_first is None:
        return NO_LEDGER
    if group is None or first is None or content is None:
        return None
    return LedgerChunk(first=first, content=bytes(content), group_first=group_first, group=bytes(group))


# The lock's columns after the rows': the receipts held (an operation's lock only), the four of the
# ledger chunk, `read_fresh`, the new operation's id (a plan's lock only).
_OPERATION_FRESH_AT = _MISSION_WIDTH + _OPERATION_WIDTH + 5
_PLAN_FRESH_AT = _RUN_WIDTH + _MISSION_WIDTH + _OPERATION_WIDTH + 4


def lock_operation(caller: Caller, operation_id: int) -> LockedOperation | None:
    """The operation's mission locked, with the operation; None when the caller cannot see it."""
    params = {**caller.params(), **_operation_params(operation_id)}
    rows = _fresh_rows(ledger_sql.LOCK_OPERATION_PG, ledger_sql.LOCK_OPERATION_SQLITE, params, fresh_at=_OPERATION_FRESH_AT)
    return _locked_operation(rows[0]) if rows else None


def _operation_params(operation_id: int) -> dict[str, Any]:
    return {"operation_id": operation_id, "chunk_of": operation_id}


def _locked_operation(row: Sequence[Any]) -> LockedOperation:
    mission = runner.model_from_row(Mission, row[:_MISSION_WIDTH])
    end = _MISSION_WIDTH + _OPERATION_WIDTH
    operation = runner.model_from_row(Operation, row[_MISSION_WIDTH:end])
    operation.mission = mission
    return LockedOperation(mission=mission, operation=operation, receipts_held=row[end], ledger=_ledger(*row[end + 1 : end + 5]))


def lock_plan(caller: Caller, run_id: int, key: str) -> LockedPlan | None:
    """The run and its mission locked, with the operation planned with `key` already; None when
    the caller cannot see the run."""
    params = {**caller.params(), **_plan_params(run_id, key)}
    rows = _fresh_rows(ledger_sql.LOCK_PLAN_PG, ledger_sql.LOCK_PLAN_SQLITE, params, fresh_at=_PLAN_FRESH_AT)
    return _locked_plan(rows[0]) if rows else None


def _plan_params(run_id: int, key: str) -> dict[str, Any]:
    return {"run_id": run_id, "key": key, "chunk_of": PAST_EVERY_ID}


def _locked_plan(row: Sequence[Any]) -> LockedPlan:
    run = runner.model_from_row(Run, row[:_RUN_WIDTH])
    mission_end = _RUN_WIDTH + _MISSION_WIDTH
    mission = runner.model_from_row(Mission, row[_RUN_WIDTH:mission_end])
    run.mission = mission
    end = mission_end + _OPERATION_WIDTH
    earlier = runner.model_from_row(Operation, row[mission_end:end]) if row[mission_end] is not None else None
    return LockedPlan(run=run, mission=mission, earlier=earlier, new_id=row[end + 5], ledger=_ledger(*row[end : end + 4]))


def lock_operation_as(who: Caller | Credentials, operation_id: int, count: Count | None = None) -> LockedFor[LockedOperation] | None:
    """`lock_operation` for a caller the same statement authenticates (an agent token by its hash;
    `count`: the request counted in it too). None when the token is not valid."""
    return locked_as(
        who,
        (ledger_sql.LOCK_OPERATION_AS_WHO_PG, ledger_sql.LOCK_OPERATION_AS_WHO_COUNTED_PG),
        _operation_params(operation_id),
        count,
        lock=lambda caller: lock_operation(caller, operation_id),
        read=_locked_operation,
        fresh_at=_OPERATION_FRESH_AT,
    )


def lock_plan_as(who: Caller | Credentials, run_id: int, key: str, count: Count | None = None) -> LockedFor[LockedPlan] | None:
    """`lock_plan` for a caller the same statement authenticates, as `lock_operation_as`."""
    return locked_as(
        who,
        (ledger_sql.LOCK_PLAN_AS_WHO_PG, ledger_sql.LOCK_PLAN_AS_WHO_COUNTED_PG),
        _plan_params(run_id, key),
        count,
        lock=lambda caller: lock_plan(caller, run_id, key),
        read=_locked_plan,
        fresh_at=_PLAN_FRESH_AT,
    )


@dataclass(frozen=True)
class OperationChange:
    """An operation's change as a call made it in memory: the operation (every column as it is
    to be stored), its event, its audit event (unsaved), the run to beat (or None) and the save
    state that goes with it."""

    operation: Operation
    planned: bool
    event: str
    audit: AuditEvent
    save: StateSave
    beat_run_id: int | None = None
    event_external_status: str = ""
    event_receipt: dict[str, Any] | None = None
    event_error: str = ""


def operation_write(change: OperationChange) -> int | None:
    """Write the change: one statement on PostgreSQL. The new snapshot request's id, or None when
    one was pending already."""
    op, audit, save = change.operation, change.audit, change.save
    params: dict[str, Any] = {
        "now": op.updated_at,
        "beat_run_id": change.beat_run_id,
        "operation_id": op.pk,
        "mission_id": op.mission_id,
        "run_id": op.run_id,
        "key": op.key,
        "request_hash": op.request_hash,
        "kind": op.kind,
        "target": op.target,
        "request": runner.json_text(op.request),
        "status": op.status,
        "attempts": op.attempts,
        "max_attempts": op.max_attempts,
        "external_id": op.external_id,
        "external_status": op.external_status,
        "receipt": None if op.receipt is None else runner.json_text(op.receipt),
        "completion_hash": op.completion_hash,
        "error": op.error,
        "retryable": op.retryable,
        "event": change.event,
        "event_external_status": change.event_external_status,
        "event_receipt": None if change.event_receipt is None else runner.json_text(change.event_receipt),
        "event_error": change.event_error,
        "actor_user_id": audit.actor_user_id,
        "actor_token_id": audit.actor_token_id,
        "actor": audit.actor,
        "action": audit.action,
        "from_state": audit.from_state,
        "to_state": audit.to_state,
        "audit_data": runner.json_text(audit.data),
        "state_version": save.state_version,
        "state_refs": runner.json_text(save.state_refs),
        "state_pending": runner.json_text(save.state_pending),
        "state_report": runner.json_text(save.state_report),
        "not_before": save.snapshot_not_before,
    }
    if runner.is_postgresql():
        shas = list(save.parts)
        statement = ledger_sql.OPERATION_PLAN_PG if change.planned else ledger_sql.OPERATION_CHANGE_PG
        rows = runner.fetch(statement, {**params, "part_shas": shas, "part_data": [save.parts[s] for s in shas]})
    else:
        beat, written, event, audited, store, saved, ask = ledger_sql.OPERATION_PLAN_SQLITE if change.planned else ledger_sql.OPERATION_CHANGE_SQLITE
        chosen = [(beat, params)] if change.beat_run_id is not None else []
        chosen += [(written, params), (event, params), (audited, params)]
        chosen += [(store, {**params, "sha": sha, "data": data}) for sha, data in save.parts.items()]
        rows = runner.steps([*chosen, (saved, params), (ask, params)])[-1][0]
    return rows[0][0] if rows else None
