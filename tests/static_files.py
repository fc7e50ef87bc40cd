"""WhiteNoise scans the static files once per test process instead of once per client.

With DEBUG off (as pytest-django runs the tests) WhiteNoiseMiddleware lists every file the
staticfiles finders know when it is built, and it is built again for every handler that loads the
middleware: every test client's first request, every live server. That scan (about 180 files,
60-120 ms on this machine) then ran well over a thousand times a run. Its result depends only on
the settings read below, so it is kept per process, keyed by them: a test that changes one of them
gets a scan of its own, as it would without this.
"""

from typing import Any

from django.conf import settings as django_settings
from whitenoise.middleware import WhiteNoiseMiddleware

# Every setting WhiteNoiseMiddleware.__init__ (and the staticfiles finders it asks) reads.
SCAN_SETTINGS = (
    "DEBUG",
    "FORCE_SCRIPT_NAME",
    "INSTALLED_APPS",
    "STATIC_ROOT",
    "STATIC_URL",
    "STATICFILES_DIRS",
    "STATICFILES_FINDERS",
    "WHITENOISE_ADD_HEADERS_FUNCTION",
    "WHITENOISE_ALLOW_ALL_ORIGINS",
    "WHITENOISE_AUTOREFRESH",
    "WHITENOISE_CHARSET",
    "WHITENOISE_IMMUTABLE_FILE_TEST",
    "WHITENOISE_INDEX_FILE",
    "WHITENOISE_MAX_AGE",
    "WHITENOISE_MIMETYPES",
    "WHITENOISE_ROOT",
    "WHITENOISE_STATIC_PREFIX",
    "WHITENOISE_USE_FINDERS",
)

_scanned: dict[str, dict[str, Any]] = {}


def _key() -> str:
    # repr, not a tuple of the values: some are lists or dicts, which do not hash.
    return repr([getattr(django_settings, name, None) for name in SCAN_SETTINGS])


def scan_once() -> None:
    """Make WhiteNoiseMiddleware reuse the state of the first one built with the same settings
    (its files table is only read when autorefresh is off; with autorefresh on it scans nothing)."""
    build = WhiteNoiseMiddleware.__init__
    if getattr(build, "scans_once", False):
        return

    def __init__(self: WhiteNoiseMiddleware, get_response: Any = None, settings: Any = django_settings) -> None:
        if settings is not django_settings:  # settings of its own: not what the key describes
            build(self, get_response, settings)
            return
        key = _key()
        state = _scanned.get(key)
        if state is None:
            build(self, get_response, settings)
            _scanned[key] = {name: value for name, value in vars(self).items() if name != "get_response"}
            return
        vars(self).update(state)
        self.get_response = get_response

    __init__.scans_once = True  # type: ignore[attr-defined]
    WhiteNoiseMiddleware.__init__ = __init__  # type: ignore[method-assign]
