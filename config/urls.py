import sys

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.db.utils import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template import loader
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found, server_error

from quests.api import DATABASE_RETRY_AFTER, api, database_unavailable_response
from quests.web.login import AdminLoginForm, LoginForm

admin.site.login_form = AdminLoginForm


@csrf_exempt
def mcp_endpoint(request):
    """quests.api.mcp_http's view, imported on the first MCP request: the MCP SDK takes seconds to
    import, which every process that loads the URLs (each web worker, each test server) would pay
    at its first request whether or not it ever serves /mcp."""
    from quests.api.mcp_http import mcp_endpoint as served

    return served(request)


urlpatterns = [
    # The admin, and before its own pages the old addresses of the checkpoint tables' (checkpoints/urls.py).
    path("admin/", include([path("checkpoints/", include("checkpoints.urls")), path("", admin.site.urls)])),
    # Django's sign-in views, named as django.contrib.auth.urls names them; the login form explains a
    # lockout. Not that module itself: it routes the password-reset pages too.
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=LoginForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("api/v1/", api.urls),
    # The MCP server (streamable HTTP) for agent hosts, on the same bearer tokens as the API.
    path("mcp", mcp_endpoint, name="mcp"),
    path("", include("quests.retention.urls")),
    path("", include("notifications.urls")),
    path("", include("quests.web.urls")),
]
# Django's password-reset pages only once the server sends email (QUESTLOG_PASSWORD_RESET): until
# then they would promise a mail that never comes. Unrouted, nothing links to them either (the admin
# shows its "forgotten your password?" link only when its reset URL resolves).
if settings.QUESTLOG_PASSWORD_RESET:
    urlpatterns.append(path("accounts/", include("quests.web.password_reset")))


def _api_error(request, status: int, code: str, message: str):
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return _api_error(request, 404, "not_found", "Nothing with that id here.")
    return page_not_found(request, exception)


def handler500(request):
    # Django calls this inside its `except` block, so the exception is still at hand. A database
    # that cannot be reached (on connect, or lost mid-request) is an outage to wait out, not a bug:
    # 503 with Retry-After, and a page that needs no database to render.
    if isinstance(exc := sys.exc_info()[1], (OperationalError, InterfaceError)):
        if request.path.startswith("/api/"):
            return database_unavailable_response(exc)
        response = HttpResponse(loader.get_template("503.html").render(), status=503)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER)
        return response
    if request.path.startswith("/api/"):
        return _api_error(request, 500, "server_error", "Something went wrong on our side; nothing was half-written.")
    return server_error(request)
