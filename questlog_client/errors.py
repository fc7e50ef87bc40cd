"""One exception class per error code of the agent API (API.md), so an agent reacts to a person's
pause or a key conflict with `except RunEnded` instead of parsing JSON."""

from __future__ import annotations

from typing import Any


class QuestlogError(Exception):
    """Base of everything this client raises."""


class TransportError(QuestlogError):
    """The server could not be reached (after the retries an idempotent call is allowed)."""


class ApiError(QuestlogError):
    """An error answer from the API: `status`, `code`, `message` and the whole `error` object."""

    status: int = 0
    code: str = "error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.error: dict[str, Any] = error or {}

    @property
    def field(self) -> str | None:
        return self.error.get("field")

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class MalformedJSON(ApiError):
    status, code = 400, "malformed_json"


class InvalidInput(ApiError):
    """400/422 `invalid`: `field` names the offending field when the server knows it."""

    status, code = 422, "invalid"


class Unauthenticated(ApiError):
    status, code = 401, "unauthenticated"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class Conflict(ApiError):
    """409: the request is well formed but the mission's state does not allow it."""

    status, code = 409, "conflict"


class RunActive(Conflict):
    code = "run_active"

    @property
    def run_id(self) -> int | None:
        return self.error.get("run_id")


class RunEnded(Conflict):
    """The run was ended — by a person's pause or cancel, an approval request, a gate milestone, a
    stop, or a newer run taking over. `stop_reason` says which."""

    code = "run_ended"

    @property
    def stop_reason(self) -> str | None:
        return self.error.get("stop_reason")


class MissionNotStartable(Conflict):
    code = "mission_not_startable"

    @property
    def mission_status(self) -> str | None:
        return self.error.get("status")

    @property
    def stop_reason(self) -> str | None:
        """Why the mission stopped (`paused_by_user`, `cancelled_by_user`, …) when the client knew
        it; the server's own answer names only the mission's `status`."""
        return self.error.get("stop_reason")


class KeyReuse(Conflict):
    code = "key_reuse"

    @property
    def key(self) -> str | None:
        return self.error.get("key")


class InvalidTransition(Conflict):
    code = "invalid_transition"


class RetryBudgetExhausted(Conflict):
    code = "retry_budget_exhausted"


class ServerError(ApiError):
    """5xx: retried for idempotent calls, raised once the retries are used up."""

    status, code = 500, "server_error"


class OperationFailed(QuestlogError):
    """A side effect failed for good (recorded with `retryable: false`), or the agent's effect
    raised `EffectFailed`. `operation` is the ledger entry."""

    def __init__(self, message: str, operation: Any) -> None:
        super().__init__(message)
        self.operation = operation


class ReconcileNeeded(QuestlogError):
    """An earlier attempt of this operation may or may not have happened, and no reconcile hook
    was given to find out. Repeating it blindly could do it twice, so the client refuses."""

    def __init__(self, operation: Any) -> None:
        super().__init__(
            f"Operation {operation.key!r} was attempted but never confirmed; pass reconcile= to check with the external service whether it happened."
        )
        self.operation = operation


class EffectFailed(QuestlogError):
    """Raise this from a side effect that certainly did not happen. `retryable` says whether a
    later attempt may try again (it is recorded on the operation)."""

    def __init__(self, error: str, *, retryable: bool = True) -> None:
        super().__init__(error)
        self.error = error
        self.retryable = retryable


class StillWaiting(QuestlogError):
    """The mission still waits for a person: `approvals` are the pending ones (models.Approval).
    Nothing was started; try again once they are decided (`Mission.wait_for_person` waits)."""

    def __init__(self, message: str, *, mission_id: int, approvals: list[Any]) -> None:
        super().__init__(message)
        self.mission_id = mission_id
        self.approvals = approvals


class RunStateMismatch(QuestlogError):
    """A saved agent state this process cannot restore: written in a schema this SDK does not
    read, or naming agents the agent given does not have. Never silently restarted: the message
    names what was saved and what this process has."""

    def __init__(self, message: str, *, saved: dict[str, Any], available: dict[str, Any]) -> None:
        super().__init__(message)
        self.saved = saved
        self.available = available


_BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        MalformedJSON,
        InvalidInput,
        Unauthenticated,
        Forbidden,
        NotFound,
        PayloadTooLarge,
        RunActive,
        RunEnded,
        MissionNotStartable,
        KeyReuse,
        InvalidTransition,
        RetryBudgetExhausted,
    )
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidInput,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
}


def error_for(status: int, body: Any) -> ApiError:
    """The exception for an error answer: by `code` first, then by HTTP status."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"message": str(body)[:500] if body else f"HTTP {status}"}
    code = str(error.get("code") or "")
    cls = _BY_CODE.get(code) or (ServerError if status >= 500 else _BY_STATUS.get(status, ApiError))
    return cls(str(error.get("message") or f"HTTP {status}"), status=status, code=code or None, error=error)
