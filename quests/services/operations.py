"""The operation ledger: every external side effect, keyed so it is never repeated. A receipt is
always accepted, even from an ended run and past the request rate: the truth about the outside
world is never dropped. Only its size and the number one operation keeps are bounded
(quests.limits), so a receipt cannot be a way around the rate."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from checkpoints import sections
from checkpoints.models import Operation, OperationStatus as O
from checkpoints.services import canonical_json, sha256_hex
from quests import limits
from quests.engine import operations as ledger, writes
from quests.models import AuditEvent, Mission
from quests.services import idempotency, machine, savestate, tokens
from quests.services.audit import Actor, audit_event
from quests.services.errors import Conflict, InvalidInput, NotFound, run_ended
from quests.services.locking import refuse_unless_active
from quests.services.snapshots import snapshot_asked, state_save_of


def _hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


@idempotency.retried_on_key_race
def operation_plan(
    *, actor: Actor | writes.Credentials, run_id: int, key: str, kind: str, target: str, request: dict[str, Any], max_attempts: int = 3
) -> tuple[Operation, bool]:
    """Plan a side effect. The same key with the same request answers the existing operation with
    its current status — that is how a resumed run learns it already did this. An agent token's
    `Credentials` are authenticated by the statement that locks (`tokens.locked_for`)."""
    request_hash = _hash({"kind": kind, "target": target, "request": request})
    with transaction.atomic():
        # The operation's own key is its idempotency key: the statement that locks the mission
        # also finds an operation planned with it (a race is settled by the unique constraint).
        actor, locked = tokens.locked_for(actor, lambda c: ledger.lock_plan(c, run_id, key), lambda who, count: ledger.lock_plan_as(who, run_id, key, count))
        if locked is None:
            raise NotFound(f"No run with id {run_id}.")
        if max_attempts < 1:  # after authentication: a caller that is not valid hears 401 first
            raise InvalidInput("max_attempts must be at least 1.", field="max_attempts")
        if locked.earlier is not None:
            if locked.earlier.request_hash != request_hash:
                raise idempotency.key_reuse(key)
            return locked.earlier, True
        run, mission = locked.run, locked.mission
        chunk = _ledger_read(mission, locked.ledger, None)
        refuse_unless_active(run, mission)  # fencing; the run's heartbeat goes with the write
        now = timezone.now()
        op = Operation(
            id=locked.new_id,
            created_at=now,
            updated_at=now,
            mission=mission,
            run=run,
            key=key,
            request_hash=request_hash,
            kind=kind,
            target=target,
            request=request,
            max_attempts=max_attempts,
        )
        planned = audit_event(actor=actor, mission=mission, entity="operation", entity_id=op.pk, action="plan", to_state=O.PLANNED, key=key)
        _write(op, mission, chunk, event="planned", audit=planned, planned=True, beat_run_id=run.pk)
        op._state.adding = False
        return op, False


def _locked_operation(
    actor: Actor | writes.Credentials, operation_id: int, *, receipt: bool = False
) -> tuple[Actor, Operation, Mission, sections.LedgerChunk, int]:
    """The actor (an agent token's `Credentials` authenticated by the lock's own statement, its
    request counted; a `receipt` never refused by the rate), the mission locked and, in the same
    statement, the operation (current, since it is read under the lock), the receipts it holds
    (see `_receipt_room`) and the chunk of the ledger that holds it, which the change will rewrite
    (never the whole ledger: a receipt costs the same however long the ledger is)."""
    actor, locked = tokens.locked_for(
        actor, lambda c: ledger.lock_operation(c, operation_id), lambda who, count: ledger.lock_operation_as(who, operation_id, count), receipt=receipt
    )
    if locked is None:
        raise NotFound(f"No operation with id {operation_id}.")
    op, mission = locked.operation, locked.mission
    return actor, op, mission, _ledger_read(mission, locked.ledger, operation_id), locked.receipts_held


def _ledger_read(mission: Mission, chunk: sections.LedgerChunk | None, operation_id: int | None) -> sections.LedgerChunk:
    """The stored ledger chunk (and its group) the lock read, unless the mission's current
    document had to be built first (or did not hold the chunk): then the chunk is the one the
    new document made (`savestate.ledger_chunk_of`)."""
    mission.blobs_guarded = True  # the lock took the blob writers' shared lock
    if savestate.ensure_current(mission) or chunk is None:
        return savestate.ledger_chunk_of(mission, operation_id)
    return chunk


# The events that are receipts: what the outside world answered.
RECEIPT_EVENTS = ("completed", "failed", "observed")


def _receipt_size(receipt: dict[str, Any] | None) -> None:
    """Refuse a receipt object over RECEIPT_BYTES_MAX (after the lock that authenticates the caller:
    a caller that is not valid hears 401 first; the transaction keeps nothing)."""
    size = len(canonical_json(receipt)) if receipt is not None else 0
    if size > limits.RECEIPT_BYTES_MAX:
        raise InvalidInput(
            f"A receipt may be at most {limits.RECEIPT_BYTES_MAX} bytes as JSON; this one is {size}.",
            field="receipt",
            limit=limits.RECEIPT_BYTES_MAX,
        )


def _receipt_room(op: Operation, held: int) -> None:
    """Receipts are never refused by the request rate, so their number is bounded here instead:
    RECEIPTS_PER_OPERATION_MAX, plus one for each attempt (every attempt may end in a receipt of
    its own, and attempts are rate-limited)."""
    allowed = limits.RECEIPTS_PER_OPERATION_MAX + op.attempts
    if held >= allowed:
        raise InvalidInput(
            f"This operation already holds {held} receipts, the most it keeps ({limits.RECEIPTS_PER_OPERATION_MAX} plus one per attempt).",
            field="receipt",
            limit=allowed,
        )


def _write(
    op: Operation,
    mission: Mission,
    chunk: sections.LedgerChunk,
    *,
    event: str,
    audit: AuditEvent,
    planned: bool = False,
    beat_run_id: int | None = None,
    **event_fields: Any,
) -> Operation:
    """Write the operation's change, its event, its audit event and the save state with its ledger
    chunk read under the lock rewritten with the operation as changed here: one statement
    (`quests.engine.operations.operation_write`)."""
    if not planned:
        op.updated_at = timezone.now()
    savestate.ledger_changed(mission, chunk, sections.operation_item(savestate.ledger_row(op)))
    save = state_save_of(mission, f"operation.{event}", applied=True)
    change = ledger.OperationChange(
        operation=op,
        planned=planned,
        event=event,
        audit=audit,
        save=save,
        beat_run_id=beat_run_id,
        event_external_status=event_fields.get("external_status", ""),
        event_receipt=event_fields.get("receipt"),
        event_error=event_fields.get("error", ""),
    )
    snapshot_asked(ledger.operation_write(change), save)
    return op


def operation_attempt(*, actor: Actor | writes.Credentials, operation_id: int) -> Operation:
    with transaction.atomic():
        actor, op, mission, chunk, _ = _locked_operation(actor, operation_id)
        if op.is_terminal:
            if op.status == O.FAILED:
                raise Conflict("This operation failed for good; plan a new one to try something else.", code="invalid_transition", status=op.status)
            machine.require(op, "attempt")
        if mission.active_run_id is None:
            last = mission.runs.order_by("-number").first()
            raise run_ended(last.stop_reason if last else None)
        if op.attempts >= op.max_attempts:
            raise Conflict(
                f"This operation has used all {op.max_attempts} attempts.",
                code="retry_budget_exhausted",
                attempts=op.attempts,
                max_attempts=op.max_attempts,
            )
        op.attempts += 1
        moved = machine.moved(op, event="attempt", to=O.ATTEMPTED, actor=actor, mission=mission, key=op.key)
        # The mission's active run attempts it: its heartbeat goes with the write.
        return _write(op, mission, chunk, event="attempted", audit=moved, beat_run_id=mission.active_run_id)


def operation_complete(
    *, actor: Actor | writes.Credentials, operation_id: int, external_id: str, external_status: str, receipt: dict[str, Any] | None = None
) -> Operation:
    completion_hash = _hash({"external_id": external_id, "external_status": external_status, "receipt": receipt})
    with transaction.atomic():
        actor, op, mission, chunk, held = _locked_operation(actor, operation_id, receipt=True)
        _receipt_size(receipt)
        if op.status == O.COMPLETED:
            if op.completion_hash == completion_hash:
                return op  # the same receipt again: a no-op
            machine.require(op, "complete")
        _receipt_room(op, held)
        op.external_id = external_id
        op.external_status = external_status
        op.receipt = receipt
        op.completion_hash = completion_hash
        op.error = ""
        moved = machine.moved(op, event="complete", to=O.COMPLETED, actor=actor, mission=mission, key=op.key)
        return _write(op, mission, chunk, event="completed", audit=moved, external_status=external_status, receipt=receipt)


def operation_fail(*, actor: Actor | writes.Credentials, operation_id: int, error: str, retryable: bool) -> Operation:
    with transaction.atomic():
        actor, op, mission, chunk, held = _locked_operation(actor, operation_id, receipt=True)
        machine.require(op, "fail")
        _receipt_room(op, held)
        op.error = error
        op.retryable = retryable
        moved = machine.moved(op, event="fail", to=O.FAILED, actor=actor, mission=mission, key=op.key)
        return _write(op, mission, chunk, event="failed", audit=moved, error=error)


def operation_observe(*, actor: Actor | writes.Credentials, operation_id: int, external_status: str, receipt: dict[str, Any] | None = None) -> Operation:
    """Record what later became of the external object (e.g. `confirmed` → `cancelled`)."""
    with transaction.atomic():
        actor, op, mission, chunk, held = _locked_operation(actor, operation_id, receipt=True)
        _receipt_size(receipt)
        _receipt_room(op, held)
        previous = op.external_status
        op.external_status = external_status
        if receipt is not None:
            op.receipt = receipt
        # Not a status change: the audit states stay the operation's own, the external ones go in the data.
        observed = audit_event(
            actor=actor,
            mission=mission,
            entity="operation",
            entity_id=op.pk,
            action="observe",
            from_state=op.status,
            to_state=op.status,
            key=op.key,
            external_status_from=previous,
            external_status=external_status,
        )
        return _write(op, mission, chunk, event="observed", audit=observed, external_status=external_status, receipt=receipt)
