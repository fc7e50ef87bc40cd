import re
import time
import zoneinfo
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib import messages
from django.db import connection
from django.db.utils import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.common import CommonMiddleware
from django.shortcuts import resolve_url
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect

from quests.services.errors import PayloadTooLarge
from quests.services.preferences import SESSION_TIME_ZONE
from quests.web import HtmxHttpRequest

API_PREFIX = "/api/"


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIX) or path == API_PREFIX.rstrip("/")


# Raw tool output may be larger than other bodies; the endpoint re-checks by record kind.
_RECORDS_PATH = re.compile(r"^/api/v1/runs/[^/]+/records/?$")


class ApiBodyLimitMiddleware:
    """Answers 413 with the API's JSON error body before an oversized body is read."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(API_PREFIX) and request.method in ("POST", "PUT", "PATCH"):
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


class HtmxSessionEndedMiddleware:
    """An htmx request whose session has ended (logged out in another tab, expired) gets a redirect
    htmx follows as a whole page: to the login page, with `next` back to the page the person was
    on. Without it htmx would swap the login page into the region it asked for. A form sent this
    way is kept (quests.web.pages.keep_unsent) and shown again on that page after logging in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HtmxHttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not getattr(request, "htmx", False) or request.user.is_authenticated:
            return response
        login_path = resolve_url(settings.LOGIN_URL)
        if response.status_code != 302 or urlsplit(response["Location"]).path != login_path:
            return response
        if request.method == "POST":
            # Imported here: the pages import the services, which this module must not need.
            from quests.web.pages import keep_unsent

            keep_unsent(request)
            messages.warning(request, "You had been logged out, so what you just sent was not applied. Log in to go back to the page: it is shown again there.")
        else:
            messages.info(request, "You had been logged out. Log in to go back to the page you were on.")
        return HttpResponseClientRedirect(f"{login_path}?{urlencode({'next': _page_seen(request)})}")


def _page_seen(request: HtmxHttpRequest) -> str:
    """The page the person was looking at (htmx's HX-Current-URL), if it is one of ours, else home."""
    current = request.htmx.current_url or ""
    if not url_has_allowed_host_and_scheme(current, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return "/"
    parts = urlsplit(current)
    return parts.path + (f"?{parts.query}" if parts.query else "")


# The cookie static/js/questlog.js keeps with the browser's time zone (an IANA name).
TIME_ZONE_COOKIE = "questlog_tz"


def person_time_zone(request: HttpRequest) -> zoneinfo.ZoneInfo | None:
    """The zone the pages show times in: the person's own setting, else their browser's, else
    None (the site's, UTC). An unknown name is ignored, never an error."""
    chosen = ""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        # Put in the session at login and on every change (quests.services.preferences).
        chosen = request.session.get(SESSION_TIME_ZONE, "")
    for name in (chosen, request.COOKIES.get(TIME_ZONE_COOKIE, "")):
        if name:
            try:
                return zoneinfo.ZoneInfo(name)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                continue
    return None


def is_agent_api_request(request: HttpRequest) -> bool:
    """An API request sent with an agent token (`Authorization: Bearer …`): the API acts for the
    token, never for a session that may come along with it (quests.api.auth)."""
    return is_api_path(request.path) and request.META.get("HTTP_AUTHORIZATION", "")[:7].lower() == "bearer "


class PersonTimeZoneMiddleware:
    """Activates the person's time zone for the request, so every time a page shows is theirs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # An agent's API request answers in UTC and has no person: its session is not loaded (a
        # query when a cookie comes along) for a zone nothing in the answer would use.
        zone = None if is_agent_api_request(request) else person_time_zone(request)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


class ApiErrorBodyMiddleware:
    """Every answer under /api/ is JSON, whatever DEBUG says. Django answers a path no route
    matches (or an id its converter refuses) with its HTML 404 page, the technical one under DEBUG,
    and django-ninja answers a method a route does not serve with a plain-text 405: a client that
    reads the API's error body would get neither. Both are rewritten here into the API's body,
    keeping the status and the `Allow` header."""

    REWRITTEN = {
        404: ("not_found", "Nothing here: no such path, or nothing with that id."),
        405: ("method_not_allowed", "This path does not take that method; Allow lists the ones it takes."),
    }

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not is_api_path(request.path) or response.status_code not in self.REWRITTEN:
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response  # already the API's own error body
        code, message = self.REWRITTEN[response.status_code]
        rewritten = JsonResponse({"error": {"code": code, "message": message}}, status=response.status_code)
        if response.has_header("Allow"):
            rewritten["Allow"] = response["Allow"]
        return rewritten


class ApiExactPathsCommonMiddleware(CommonMiddleware):
    """Django's CommonMiddleware, except that an API path is never redirected to the same path with
    a slash appended (APPEND_SLASH): a client does not follow a redirect to an error, and under
    DEBUG a POST to such a path would be Django's HTML RuntimeError page. It is answered as it is:
    the API's JSON 404 when nothing is there."""

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        return not is_api_path(request.path_info) and super().should_redirect_with_slash(request)
