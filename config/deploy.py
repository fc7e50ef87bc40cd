"""What a deployment must get right before it serves anyone: a secret key of its own, HTTPS behind
a TLS-terminating proxy, and the security headers every answer carries.

Kept apart from config/settings.py so that config/gunicorn.py can refuse a missing key before any
worker boots, without loading Django's settings in the arbiter.
"""

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

# Good enough for a laptop: anyone who reads this file can forge sessions and CSRF tokens with it,
# so it is only ever used with DEBUG on.
DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-change-me-in-production"

# A year: long enough that browsers keep to HTTPS between visits (what the HSTS preload list
# asks for), short enough to undo a mistake within a year.
HSTS_SECONDS = 365 * 24 * 3600

# No inline script, style or event handler anywhere: templates load /static/ files only, and htmx
# is told not to add its indicator <style> (templates/base.html). Images may be data: URLs for the
# browser's own form controls; nothing may frame the pages, post forms elsewhere or move <base>.
CONTENT_SECURITY_POLICY = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
    "base-uri": [CSP.NONE],
}


class InsecureSecretKey(ImproperlyConfigured):
    """DEBUG is off and DJANGO_SECRET_KEY is missing, empty or the development key."""


def env_flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def secret_key_refusal(environ: Mapping[str, str]) -> str | None:
    """Why this environment may not start, or None. DEBUG off means a real deployment, whose
    sessions and CSRF tokens must not be forgeable by anyone who has read this repository."""
    if env_flag(environ, "DJANGO_DEBUG", True):
        return None
    key = environ.get("DJANGO_SECRET_KEY", "").strip()
    if not key:
        problem = "DJANGO_SECRET_KEY is unset or empty"
    elif key == DEVELOPMENT_SECRET_KEY:
        problem = "DJANGO_SECRET_KEY is the development key"
    else:
        return None
    return (
        f"Refusing to start: {problem} and DJANGO_DEBUG is off; set DJANGO_SECRET_KEY to a long random value "
        "(python3 -c 'import secrets; print(secrets.token_urlsafe(50))') or DJANGO_DEBUG=1 for development."
    )


def secret_key(environ: Mapping[str, str]) -> str:
    """The key to sign with, or InsecureSecretKey (raised while the settings load, so no command
    and no server runs without one)."""
    if refusal := secret_key_refusal(environ):
        raise InsecureSecretKey(refusal)
    # As given, never trimmed: a deployment's existing sessions stay valid.
    return environ.get("DJANGO_SECRET_KEY") or DEVELOPMENT_SECRET_KEY

