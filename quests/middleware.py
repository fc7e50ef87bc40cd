import re
import time

from django.conf import settings
from django.db import connection
from django.db.utils import OperationalError
from django.http import JsonResponse

from quests.services.errors import PayloadTooLarge

# Raw tool output may be larger than other bodies; the endpoint re-checks by record kind.
_RECORDS_PATH = re.compile(r"^/api/v1/runs/[^/]+/records/?$")


class ApiBodyLimitMiddleware:
    """Answers 413 with the API's JSON error body before an oversized body is read."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/") and request.method in ("POST", "PUT", "PATCH"):
            limit = settings.QUESTLOG_MAX_BODY_BYTES
            if _RECORDS_PATH.match(request.path):
                limit = settings.QUESTLOG_MAX_TOOL_OUTPUT_BYTES
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                too_large = PayloadTooLarge(limit)
                return JsonResponse({"error": {"code": too_large.code, "message": too_large.message, **too_large.extra}}, status=413)
        return self.get_response(request)


class RequestDeadlineExceeded(OperationalError):
    """A request ran past QUESTLOG_REQUEST_TIMEOUT: answered like any database that did not answer
    in time (503 `unavailable`), and its transaction is rolled back."""


class RequestDeadlineMiddleware:
    """Refuses to start a database statement once the request has run QUESTLOG_REQUEST_TIMEOUT
    seconds, as long as the request has committed no transaction: the transaction in progress is
    rolled back and the answer is 503, so the client knows nothing was written. (Once a transaction
    has been committed the request is allowed to finish: a 503 then would hide a write that
    happened. Bookkeeping written outside a transaction, such as a token's last use, does not count.)

    The statement timeout bounds one statement; this bounds them all together. gunicorn's worker
    timeout cannot: a gthread worker keeps reporting alive while one of its threads is busy, so a
    request thread is never cut short by it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        seconds = settings.QUESTLOG_REQUEST_TIMEOUT
        if seconds <= 0:
            return self.get_response(request)
        deadline = time.monotonic() + seconds
        committed = False
        commit = connection.commit

        def commit_and_note() -> None:
            # What transaction.atomic calls when its outermost block ends well.
            nonlocal committed
            commit()
            committed = True

        def within_deadline(execute, sql, params, many, context):
            if not committed and time.monotonic() > deadline:
                raise RequestDeadlineExceeded(f"The request ran past its deadline of {seconds} s.")
            return execute(sql, params, many, context)

        # `connection` is this thread's own: other requests are not affected.
        connection.commit = commit_and_note
        try:
            with connection.execute_wrapper(within_deadline):
                return self.get_response(request)
        finally:
            del connection.commit
