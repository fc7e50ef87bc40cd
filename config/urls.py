from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.defaults import page_not_found, server_error

from quests.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("", include("quests.retention.urls")),
    path("", include("quests.web.urls")),
]


def _api_error(request, status: int, code: str, message: str):
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return _api_error(request, 404, "not_found", "Nothing with that id here.")
    return page_not_found(request, exception)


def handler500(request):
    if request.path.startswith("/api/"):
        return _api_error(request, 500, "server_error", "Something went wrong on our side; nothing was half-written.")
    return server_error(request)
