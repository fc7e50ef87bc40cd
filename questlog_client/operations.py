"""The operation ledger's safe path for a side effect: plan it, attempt it, run the effect, record
the receipt — and never repeat an effect an earlier run may have done (`reconcile`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from questlog_client import errors, models


class Run(Protocol):
    """What an operation needs of its run (`questlog_client.runs.Run` is one): its id and its
    fenced call. A protocol, so this module does not import the runs module that imports it."""

    @property
    def id(self) -> int: ...

    def _call(self, method: str, path: str, body: dict[str, Any] | None, *, idempotent: bool | None = None) -> tuple[int, Any]: ...


Effect = Callable[[models.Operation], "models.Outcome | dict[str, Any]"]
Reconcile = Callable[[models.Operation], "models.Outcome | dict[str, Any] | None"]


class SideEffects:
    """`operation(...)` for anything an operation runs in: a run (`questlog_client.runs.Run`) and a
    LangGraph thread's session run."""

    def operation(
        self: Run,
        key: str,
        *,
        kind: str,
        target: str,
        request: dict[str, Any],
        max_attempts: int = 3,
        reconcile: Reconcile | None = None,
    ) -> OperationCall:
        """The safe way to cause a side effect. Call the answer with the effect:

            receipt = run.operation("invite", kind="email.send", target=to, request=body,
                                    reconcile=mail.lookup)(lambda op: mail.send(body, ref=op.id))

        It plans the operation (idempotency `key`, unique per mission), attempts it, runs the
        effect and records its receipt. When an earlier run completed it, the stored receipt is
        answered and the effect is not run again. When an earlier attempt was never confirmed,
        `reconcile(op)` must say whether it happened (an Outcome) or not (None) before anything is
        repeated; without a hook that is `ReconcileNeeded`."""
        return OperationCall(self, key=key, kind=kind, target=target, request=request, max_attempts=max_attempts, reconcile=reconcile)


class OperationCall:
    """What `operation(...)` answers: call it with the effect (see `SideEffects.operation`)."""

    def __init__(self, run: Run, *, key: str, kind: str, target: str, request: dict[str, Any], max_attempts: int, reconcile: Reconcile | None) -> None:
        self.run = run
        self.key = key
        self.body = {"key": key, "kind": kind, "target": target, "request": request, "max_attempts": max_attempts}
        self.reconcile = reconcile

    def __call__(self, effect: Effect) -> models.Receipt:
        return self.perform(effect)

    def plan(self) -> models.Operation:
        _, answer = self.run._call("POST", f"runs/{self.run.id}/operations", self.body)
        return models.Operation.from_dict(answer)

    def perform(self, effect: Effect) -> models.Receipt:
        op = self.plan()
        if op.status == "completed":
            return _receipt(op, replayed=True)
        if op.status == "attempted":
            if self.reconcile is None:
                raise errors.ReconcileNeeded(op)
            found = self.reconcile(op)
            if found is not None:
                return _receipt(self._complete(op, _outcome(found)), reconciled=True)
        if op.status == "failed" and op.retryable is False:
            raise errors.OperationFailed(f"Operation {self.key!r} failed for good: {op.error}", op)
        _, answer = self.run._call("POST", f"operations/{op.id}/attempt", None, idempotent=False)
        op = models.Operation.from_dict(answer)
        try:
            outcome = _outcome(effect(op))
        except errors.EffectFailed as exc:
            body = {"error": exc.error, "retryable": exc.retryable}
            self.run._call("POST", f"operations/{op.id}/fail", body, idempotent=True)
            raise errors.OperationFailed(f"Operation {self.key!r} failed: {exc.error}", op) from exc
        return _receipt(self._complete(op, outcome))

    def _complete(self, op: models.Operation, outcome: models.Outcome) -> models.Operation:
        body = {"external_id": outcome.external_id, "external_status": outcome.external_status, "receipt": outcome.receipt}
        _, answer = self.run._call("POST", f"operations/{op.id}/complete", body, idempotent=True)
        return models.Operation.from_dict(answer)


def _outcome(value: models.Outcome | dict[str, Any]) -> models.Outcome:
    if isinstance(value, models.Outcome):
        return value
    if isinstance(value, dict) and "external_id" in value and "external_status" in value:
        return models.Outcome(str(value["external_id"]), str(value["external_status"]), value.get("receipt"))
    raise TypeError("A side effect must answer an Outcome (or a dict with external_id and external_status).")


def _receipt(op: models.Operation, *, replayed: bool = False, reconciled: bool = False) -> models.Receipt:
    return models.Receipt(op, op.external_id, op.external_status, op.receipt, replayed=replayed, reconciled=reconciled)
