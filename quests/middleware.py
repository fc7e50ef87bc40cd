import re

from django.conf import settings
from django.http import JsonResponse

from quests.services.errors import PayloadTooLarge

API_PREFIX = "/api/"

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
        if not request.path.startswith(API_PREFIX) or response.status_code not in self.REWRITTEN:
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response  # already the API's own error body
        code, message = self.REWRITTEN[response.status_code]
        rewritten = JsonResponse({"error": {"code": code, "message": message}}, status=response.status_code)
        if response.has_header("Allow"):
            rewritten["Allow"] = response["Allow"]
        return rewritten
