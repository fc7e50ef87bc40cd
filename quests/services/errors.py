"""Errors that services raise and the API turns into the JSON error body of API.md."""

from typing import Any


class ServiceError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.extra = extra


class Conflict(ServiceError):
    """409: the request is well formed but the current state does not allow it."""

    status = 409
    code = "invalid_transition"


class PayloadTooLarge(ServiceError):
    status = 413
    code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is larger than {limit} bytes.", limit=limit)


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Unauthenticated(ServiceError):
    """401: a service that authenticates its caller itself (the agent's checkpoint) found no valid
    token. The API answers it as it answers any refused credentials."""

    status = 401
    code = "unauthenticated"
    MESSAGE = "Send a valid agent token (Authorization: Bearer …) or sign in."


class Forbidden(ServiceError):
    status = 403
    code = "forbidden"


class InvalidInput(ServiceError):
    status = 422
    code = "invalid"


def run_ended(stop_reason: str | None) -> Conflict:
    return Conflict(
        f"This run has ended ({stop_reason or 'ended'}); start a new run to continue the mission.",
        code="run_ended",
        stop_reason=stop_reason,
    )


def mission_not_startable(status: str) -> Conflict:
    return Conflict(
        f"This mission is {status.replace('_', ' ')} and cannot start a run now.",
        code="mission_not_startable",
        status=status,
    )


class RateLimited(ServiceError):
    """429: the token sent more requests this minute than QUESTLOG_API_RATE allows (or, with its own
    message, another throttle's count ran over)."""

    status = 429
    code = "rate_limited"

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message or f"Too many requests for this token; try again in {retry_after} s.", retry_after=retry_after)


def require_within(text: str, limit: int, *, what: str, field: str) -> None:
    """The one check of a text's length (limits in quests/limits.py), with the same words for the
    API and the pages; the schemas and forms refuse it earlier where they can."""
    if len(text) > limit:
        raise InvalidInput(f"{what} can be at most {limit:,} characters; this one has {len(text):,}. Nothing was saved.", field=field, limit=limit)
