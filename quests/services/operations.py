"""The operation ledger: every external side effect, keyed so it is never repeated. A receipt is
always accepted, even from an ended run and past the request rate: the truth about the outside
world is never dropped. Only its size and the number one operation keeps are bounded
(quests.limits), so a receipt cannot be a way around the rate."""

from typing import Any

from django.db import transaction
from django.db.models import Count, OuterRef, Subquery

from checkpoints.models import Operation, OperationEvent, OperationStatus as O
from checkpoints.roundtrip import RoundTrip
from checkpoints.services import canonical_json, sha256_hex
from quests import limits
from quests.models import Mission, Run
from quests.services import idempotency, machine, savestate
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict, InvalidInput, run_ended
from quests.services.locking import fence, lock_operation_mission, lock_run
from quests.services.snapshots import state_changed


def _hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


@idempotency.retried_on_key_race
def operation_plan(*, actor: Actor, run_id: int, key: str, kind: str, target: str, request: dict[str, Any], max_attempts: int = 3) -> tuple[Operation, bool]:
    """Plan a side effect. The same key with the same request answers the existing operation with
    its current status — that is how a resumed run learns it already did this."""
    if max_attempts < 1:
        raise InvalidInput("max_attempts must be at least 1.", field="max_attempts")
    request_hash = _hash({"kind": kind, "target": target, "request": request})
    with transaction.atomic():
        # The operation's own key is its idempotency key: the statement that locks the mission
        # also finds an operation planned with it (a race is settled by the unique constraint).
        earlier = Operation.objects.filter(mission_id=OuterRef("mission_id"), key=key)
        run, mission = lock_run(
            actor,
            run_id,
            blobs=True,
            annotations={
                "earlier_id": Subquery(earlier.values("pk")[:1]),
                "earlier_hash": Subquery(earlier.values("request_hash")[:1]),
            },
        )
        found: Any = run  # the row with the two annotations asked for above
        if found.earlier_id is not None:
            if found.earlier_hash != request_hash:
                raise idempotency.key_reuse(key)
            return Operation.objects.get(pk=found.earlier_id), True
        savestate.ensure_current(mission)
        trip = RoundTrip()
        fence(run, mission, trip=trip)
        op = Operation(
            mission=mission,
            run=run,
            key=key,
            request_hash=request_hash,
            kind=kind,
            target=target,
            request=request,
            max_attempts=max_attempts,
        )
        trip.insert(op)
        this_one = Subquery(Operation.objects.filter(mission_id=mission.pk, key=key).values("pk")[:1])
        trip.insert(OperationEvent(operation_id=this_one, event="planned"), returning=False)
        audit(actor=actor, mission=mission, entity="operation", entity_id=this_one, action="plan", to_state=O.PLANNED, key=key, trip=trip)
        ledger = savestate.read_ledger(trip, mission)
        trip.run()
        savestate.apply_ledger(mission, ledger.rows)
        state_changed(mission, "operation.planned", applied=True)
        return op, False


def _locked_operation(actor: Actor, operation_id: int, *, receipt: bool = False) -> tuple[Operation, Mission, list[dict[str, Any]]]:
    """The mission locked, then in one round trip: the operation (current, since it is read under
    the lock) and the chunk of the ledger that holds it, which the change will rewrite (never the
    whole ledger: a receipt costs the same however long the ledger is). For a `receipt`, the same
    round trip counts the receipts the operation holds (see `_receipt_room`)."""
    mission = lock_operation_mission(actor, operation_id)
    savestate.ensure_current(mission)
    trip = RoundTrip()
    found = trip.select(Operation.objects.filter(pk=operation_id))
    ledger = savestate.read_ledger(trip, mission, operation_id)
    held = (
        trip.select(OperationEvent.objects.filter(operation_id=operation_id, event__in=RECEIPT_EVENTS).values("operation_id").annotate(n=Count("pk")))
        if receipt
        else None
    )
    trip.run()
    op = found.rows[0]
    op.receipts_held = held.rows[0]["n"] if held is not None and held.rows else 0
    return op, mission, ledger.rows


# The events that are receipts: what the outside world answered.
RECEIPT_EVENTS = ("completed", "failed", "observed")


def _receipt_size(receipt: dict[str, Any] | None) -> None:
    """Refuse a receipt object over RECEIPT_BYTES_MAX, before anything is locked."""
    size = len(canonical_json(receipt)) if receipt is not None else 0
    if size > limits.RECEIPT_BYTES_MAX:
        raise InvalidInput(
            f"A receipt may be at most {limits.RECEIPT_BYTES_MAX} bytes as JSON; this one is {size}.",
            field="receipt",
            limit=limits.RECEIPT_BYTES_MAX,
        )


def _receipt_room(op: Any) -> None:  # an Operation with its `receipts_held` annotation
    """Receipts are never refused by the request rate, so their number is bounded here instead:
    RECEIPTS_PER_OPERATION_MAX, plus one for each attempt (every attempt may end in a receipt of
    its own, and attempts are rate-limited)."""
    allowed = limits.RECEIPTS_PER_OPERATION_MAX + op.attempts
    if op.receipts_held >= allowed:
        raise InvalidInput(
            f"This operation already holds {op.receipts_held} receipts, the most it keeps ({limits.RECEIPTS_PER_OPERATION_MAX} plus one per attempt).",
            field="receipt",
            limit=allowed,
        )


def _event(op: Operation, event: str, trip: RoundTrip, **fields: Any) -> None:
    trip.insert(OperationEvent(operation=op, event=event, **fields), returning=False)


def _save(op: Operation, mission: Mission, ledger: list[dict[str, Any]], trip: RoundTrip, change: str) -> Operation:
    """Send the operation's change, then save the current document with its ledger chunk
    rewritten from what was read under the lock (the changed operation as changed here)."""
    changed = savestate.ledger_row(op)
    savestate.apply_ledger(mission, [changed if row["id"] == op.pk else row for row in ledger])
    trip.run()
    state_changed(mission, change, applied=True)
    return op


def _move(
    op: Operation, mission: Mission, ledger: list[dict[str, Any]], trip: RoundTrip, *, actor: Actor, to: str, action: str, fields: list[str]
) -> Operation:
    machine.move(op, event=action, to=to, actor=actor, mission=mission, fields=("updated_at", *fields), key=op.key, trip=trip)
    return _save(op, mission, ledger, trip, f"operation.{to}")


def operation_attempt(*, actor: Actor, operation_id: int) -> Operation:
    with transaction.atomic():
        op, mission, ledger = _locked_operation(actor, operation_id)
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
        trip = RoundTrip()
        active = Run(pk=mission.active_run_id, mission=mission)
        fence(active, mission, trip=trip)
        op.attempts += 1
        _event(op, "attempted", trip)
        return _move(op, mission, ledger, trip, actor=actor, to=O.ATTEMPTED, action="attempt", fields=["attempts"])


def operation_complete(*, actor: Actor, operation_id: int, external_id: str, external_status: str, receipt: dict[str, Any] | None = None) -> Operation:
    _receipt_size(receipt)
    completion_hash = _hash({"external_id": external_id, "external_status": external_status, "receipt": receipt})
    with transaction.atomic():
        op, mission, ledger = _locked_operation(actor, operation_id, receipt=True)
        if op.status == O.COMPLETED:
            if op.completion_hash == completion_hash:
                return op  # the same receipt again: a no-op
            machine.require(op, "complete")
        _receipt_room(op)
        op.external_id = external_id
        op.external_status = external_status
        op.receipt = receipt
        op.completion_hash = completion_hash
        op.error = ""
        trip = RoundTrip()
        _event(op, "completed", trip, external_status=external_status, receipt=receipt)
        return _move(
            op,
            mission,
            ledger,
            trip,
            actor=actor,
            to=O.COMPLETED,
            action="complete",
            fields=["external_id", "external_status", "receipt", "completion_hash", "error"],
        )


def operation_fail(*, actor: Actor, operation_id: int, error: str, retryable: bool) -> Operation:
    with transaction.atomic():
        op, mission, ledger = _locked_operation(actor, operation_id, receipt=True)
        machine.require(op, "fail")
        _receipt_room(op)
        op.error = error
        op.retryable = retryable
        trip = RoundTrip()
        _event(op, "failed", trip, error=error)
        return _move(op, mission, ledger, trip, actor=actor, to=O.FAILED, action="fail", fields=["error", "retryable"])


def operation_observe(*, actor: Actor, operation_id: int, external_status: str, receipt: dict[str, Any] | None = None) -> Operation:
    """Record what later became of the external object (e.g. `confirmed` → `cancelled`)."""
    _receipt_size(receipt)
    with transaction.atomic():
        op, mission, ledger = _locked_operation(actor, operation_id, receipt=True)
        _receipt_room(op)
        previous = op.external_status
        op.external_status = external_status
        if receipt is not None:
            op.receipt = receipt
        trip = RoundTrip()
        trip.save(op, ["external_status", "receipt", "updated_at"])
        _event(op, "observed", trip, external_status=external_status, receipt=receipt)
        # Not a status change: the audit states stay the operation's own, the external ones go in the data.
        audit(
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
            trip=trip,
        )
        return _save(op, mission, ledger, trip, "operation.observed")
