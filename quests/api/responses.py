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


def answers(ok: dict[int, Any] | Any, *errors: int) -> dict[int, Any]:
    success = ok if isinstance(ok, dict) else {200: ok}
    return {**success, **{status: ErrorOut for status in sorted(set(errors))}}


def created_or_replayed(schema: Any) -> dict[int, Any]:
    """201 when the object was made, 200 when an idempotency key replayed it."""
    return {201: schema, 200: schema}
