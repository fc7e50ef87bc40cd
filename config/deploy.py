"""What a deployment must get right before it serves anyone: a secret key of its own, HTTPS behind
a TLS-terminating proxy, the security headers every answer carries, and a web server that only the
proxy can reach when the login throttle trusts the proxy's X-Forwarded-For.

Kept apart from config/settings.py so that config/gunicorn.py can refuse a missing key before any
worker boots, without loading Django's settings in the arbiter.
"""

import ipaddress
import os
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


def env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    return int(value) if value not in (None, "") else default


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


DEFAULT_BIND = "127.0.0.1:8000"


def web_workers(environ: Mapping[str, str]) -> int:
    """QUESTLOG_WEB_WORKERS: gunicorn's processes, one per CPU this process may use by default
    (config/gunicorn.py says why)."""
    return env_int(environ, "QUESTLOG_WEB_WORKERS", _cpus())


def web_threads(environ: Mapping[str, str]) -> int:
    """QUESTLOG_WEB_THREADS: the request threads of each gunicorn process (2 by default)."""
    return env_int(environ, "QUESTLOG_WEB_THREADS", 2)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use, not the machine's
    except AttributeError:
        return os.cpu_count() or 1


def bind_addresses(environ: Mapping[str, str]) -> list[str]:
    """QUESTLOG_BIND: the addresses gunicorn listens on (config/gunicorn.py), comma-separated."""
    return [address.strip() for address in environ.get("QUESTLOG_BIND", DEFAULT_BIND).split(",") if address.strip()]


def reachable_from_outside(address: str) -> bool:
    """Whether a gunicorn bind address may be reached by other machines: anything but a loopback
    address or a unix socket (a host name other than localhost may resolve to anything)."""
    if address.startswith(("unix:", "fd://")):
        return False
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    host = host.strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def proxy_bypass_problem(proxy_count: int, binds: list[str]) -> str | None:
    """Why trusting X-Forwarded-For is unsafe here, or None. With QUESTLOG_PROXY_COUNT set, the
    login throttle counts the address the proxies wrote into X-Forwarded-For; a client that reaches
    gunicorn itself writes that header, picks a new address for every guess and is never locked out."""
    exposed = [address for address in binds if reachable_from_outside(address)]
    if proxy_count <= 0 or not exposed:
        return None
    return (
        f"QUESTLOG_PROXY_COUNT is {proxy_count} but gunicorn listens on {', '.join(exposed)}: a client that reaches it "
        "there, not through the proxy, writes X-Forwarded-For itself and so chooses the address that the "
        "per-address login throttle counts."
    )
