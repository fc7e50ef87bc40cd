"""What each endpoint may answer, for the OpenAPI document: its success shapes and every error
status, each with the one error body of API.md."""

from typing import Any

from quests.schemas import ErrorOut

# Every route needs a token or a session (401). A body can be malformed (400), too large (413;
# the middleware measures every unsafe request) or invalid (422). An unsafe request with a
# session but no CSRF token is refused (403), as is a person-only action with an agent token.
READ = (401,)
ACT = (401, 403, 413)
BODY = (400, 413, 422)


# Any request may be refused for rate (429, an agent token past QUESTLOG_API_RATE) or meet the
# database down (503); both carry Retry-After.
EVERYWHERE = (429, 503)


def answers(ok: dict[int, Any] | Any, *errors: int) -> dict[int, Any]:
    success = ok if isinstance(ok, dict) else {200: ok}
    return {**success, **{status: ErrorOut for status in sorted({*errors, *EVERYWHERE})}}


def created_or_replayed(schema: Any) -> dict[int, Any]:
    """201 when the object was made, 200 when an idempotency key replayed it."""
    return {201: schema, 200: schema}
