"""The operation ledger: every external side effect, keyed so it is never repeated. A receipt is
always accepted, even from an ended run: the truth about the outside world is never dropped."""

from typing import Any

from django.db import transaction

from checkpoints.models import Operation, OperationEvent, OperationStatus as O
from checkpoints.services import canonical_json, sha256_hex
from quests.models import Mission
from quests.services import idempotency, machine
from quests.services.access import get_for
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict, InvalidInput, run_ended
from quests.services.locking import fence, lock_mission, lock_run
from quests.services.snapshots import state_changed


def _hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


def operation_plan(
    *, actor: Actor, run_id: int, key: str, kind: str, target: str, request: dict[str, Any], max_attempts: int = 3
) -> tuple[Operation, bool]:
    """Plan a side effect. The same key with the same request answers the existing operation with
    its current status — that is how a resumed run learns it already did this."""
    if max_attempts < 1:
        raise InvalidInput("max_attempts must be at least 1.", field="max_attempts")
    request_hash = _hash({"kind": kind, "target": target, "request": request})
    with transaction.atomic():
        run, mission = lock_run(actor, run_id)
        existing = Operation.objects.filter(mission=mission, key=key).first()
        if existing is not None:
            if existing.request_hash != request_hash:
                raise idempotency.key_reuse(key)
            return existing, True
        fence(run)
        op = Operation.objects.create(
            mission=mission, run=run, key=key, request_hash=request_hash, kind=kind, target=target,
            request=request, max_attempts=max_attempts,
        )
        _event(op, "planned")
        audit(actor=actor, mission=mission, entity="operation", entity_id=op.pk, action="plan", to_state=O.PLANNED, key=key)
        state_changed(mission)
        return op, False


def _locked_operation(actor: Actor, operation_id: int) -> tuple[Operation, Mission]:
    op = get_for(actor, Operation, operation_id)
    mission = lock_mission(op.mission_id)
    op.refresh_from_db()
    return op, mission


def _event(op: Operation, event: str, **fields: Any) -> None:
    OperationEvent.objects.create(operation=op, event=event, **fields)


def _move(op: Operation, mission: Mission, *, actor: Actor, to: str, action: str, fields: list[str]) -> Operation:
    machine.move(op, event=action, to=to, actor=actor, mission=mission, fields=("updated_at", *fields), key=op.key)
    state_changed(mission)
    return op


def operation_attempt(*, actor: Actor, operation_id: int) -> Operation:
    with transaction.atomic():
        op, mission = _locked_operation(actor, operation_id)
        if op.is_terminal:
            if op.status == O.FAILED:
                raise Conflict("This operation failed for good; plan a new one to try something else.", code="invalid_transition", status=op.status)
            machine.require(op, "attempt")
        active = mission.runs.filter(ended_at__isnull=True).first()
        if active is None:
            last = mission.runs.order_by("-number").first()
            raise run_ended(last.stop_reason if last else None)
        if op.attempts >= op.max_attempts:
            raise Conflict(
                f"This operation has used all {op.max_attempts} attempts.", code="retry_budget_exhausted",
                attempts=op.attempts, max_attempts=op.max_attempts,
            )
        fence(active)
        op.attempts += 1
        _event(op, "attempted")
        return _move(op, mission, actor=actor, to=O.ATTEMPTED, action="attempt", fields=["attempts"])


def operation_complete(
    *, actor: Actor, operation_id: int, external_id: str, external_status: str, receipt: dict[str, Any] | None = None
) -> Operation:
    completion_hash = _hash({"external_id": external_id, "external_status": external_status, "receipt": receipt})
    with transaction.atomic():
        op, mission = _locked_operation(actor, operation_id)
        if op.status == O.COMPLETED:
            if op.completion_hash == completion_hash:
                return op  # the same receipt again: a no-op
            machine.require(op, "complete")
        op.external_id = external_id
        op.external_status = external_status
        op.receipt = receipt
        op.completion_hash = completion_hash
        op.error = ""
        _event(op, "completed", external_status=external_status, receipt=receipt)
        return _move(op, mission, actor=actor, to=O.COMPLETED, action="complete", fields=["external_id", "external_status", "receipt", "completion_hash", "error"])


def operation_fail(*, actor: Actor, operation_id: int, error: str, retryable: bool) -> Operation:
    with transaction.atomic():
        op, mission = _locked_operation(actor, operation_id)
        machine.require(op, "fail")
        op.error = error
        op.retryable = retryable
        _event(op, "failed", error=error)
        return _move(op, mission, actor=actor, to=O.FAILED, action="fail", fields=["error", "retryable"])


def operation_observe(*, actor: Actor, operation_id: int, external_status: str, receipt: dict[str, Any] | None = None) -> Operation:
    """Record what later became of the external object (e.g. `confirmed` → `cancelled`)."""
    with transaction.atomic():
        op, mission = _locked_operation(actor, operation_id)
        previous = op.external_status
        op.external_status = external_status
        if receipt is not None:
            op.receipt = receipt
        op.save(update_fields=["external_status", "receipt", "updated_at"])
        _event(op, "observed", external_status=external_status, receipt=receipt)
        # Not a status change: the audit states stay the operation's own, the external ones go in the data.
        audit(
            actor=actor, mission=mission, entity="operation", entity_id=op.pk, action="observe", from_state=op.status,
            to_state=op.status, key=op.key, external_status_from=previous, external_status=external_status,
        )
        state_changed(mission)
        return op
