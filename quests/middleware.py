import re

from django.conf import settings
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
