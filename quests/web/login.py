"""Login throttling with django-axes: failed logins counted per account and per address, a
lockout that ends by itself (AXES_COOLOFF_TIME), and the login page that says when to retry."""

from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' check, for logins made over HTTP. A login with no request (Django's test client's
    login(), a shell) has no address or form to throttle, and axes would refuse it outright;
    every login page (ours and the admin's) passes its request, so none of them escapes."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def lockout_message(request: HttpRequest) -> str:
    cool_off = get_cool_off(request) or timedelta(0)
    # Every failure during a lockout starts the cool-off again (axes' default), so it ends one
    # cool-off from this attempt.
    until = timezone.localtime(timezone.now() + cool_off)
    minutes = max(1, round(cool_off.total_seconds() / 60))
    return (
        f"Too many failed logins for this account or from this address. Logging in is paused: try again in "
        f"{minutes} minute{'s' if minutes != 1 else ''} (after {until:%H:%M %Z})."
    )


class LockoutMessageMixin:
    """Replaces "wrong password" with the lockout and when it ends, once axes has locked out."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if getattr(self.request, "axes_locked_out", False):
                raise ValidationError(lockout_message(self.request), code="locked_out") from None
            raise


class LoginForm(LockoutMessageMixin, AuthenticationForm):
    pass


class AdminLoginForm(LockoutMessageMixin, AdminAuthenticationForm):
    pass


def lockout_response(request: HttpRequest, original_response: HttpResponse, credentials: dict | None = None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the login page as rendered, with its form error saying when to try
    again, not an error page; 429 so that scripts see the throttle too."""
    original_response.status_code = 429
    return original_response


def client_address(request: HttpRequest) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the address a login came from. Behind QUESTLOG_PROXY_COUNT
    reverse proxies REMOTE_ADDR is the nearest proxy's, and locking it out would lock out every
    person; each proxy appends the address it saw to X-Forwarded-For, so the client's is the
    entry that many places from the right (entries further left are the client's own claims)."""
    proxies = settings.QUESTLOG_PROXY_COUNT
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if proxies > 0 and len(forwarded) >= proxies:
        return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")
