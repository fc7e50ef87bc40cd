"""One settings module, driven by the environment, with development defaults that just work.

Every setting a deployer may change is read here and listed in the README's configuration table.
"""

import os
from datetime import timedelta
from pathlib import Path

from celery.schedules import crontab
from kombu import Exchange, Queue

from config.cache import api_rate, cache_settings
from config.database import default_database
from config.deploy import CONTENT_SECURITY_POLICY, HSTS_SECONDS, secret_key
from config.email import mailers

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


DATA_DIR = Path(os.environ.get("QUESTLOG_DATA_DIR") or BASE_DIR / "var").resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", True)
# With DEBUG off, a missing, empty or development key stops every command and server here.
SECRET_KEY = secret_key(os.environ)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

# Behind a proxy that terminates TLS and sets X-Forwarded-Proto (overwriting any the client sent):
# cookies only over HTTPS, plain HTTP redirected, and browsers told to keep to HTTPS for a year.
QUESTLOG_HTTPS = env_bool("QUESTLOG_HTTPS", False)
if QUESTLOG_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
# Asking to be on the browsers' preload list binds the whole domain and its subdomains to HTTPS
# for months after a change of mind: the domain's owner decides, so it is off unless asked for,
# and check --deploy's reminder about it (W021) is silenced while it is.
SECURE_HSTS_PRELOAD = QUESTLOG_HTTPS and env_bool("QUESTLOG_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# The board's count index carries updated_at as a covering column so PostgreSQL answers from the
# index alone; SQLite (the embedded default) builds it on its key columns, which is all it needs.
# Django warns about that on every command (W040) unless told it is meant.
SILENCED_SYSTEM_CHECKS.append("models.W040")
# Every page and API answer: no inline script or style (config/deploy.py), no MIME sniffing, the
# referrer only to this site, never framed (SECURE_CSP's frame-ancestors for browsers that know
# it, X-Frame-Options for those that do not).
SECURE_CSP = CONTENT_SECURITY_POLICY
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    # Only for its static files: the API docs page serves Swagger UI from here, not from a CDN.
    "ninja",
    "axes",
    "checkpoints",
    "quests",
    "notifications",
]

# The security headers' middleware comes first, so that every answer carries them: the body
# limit's 413 too, which answers before anything else reads the request.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "quests.middleware.ApiBodyLimitMiddleware",
    "quests.middleware.ApiErrorBodyMiddleware",
    "quests.middleware.RequestDeadlineMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "quests.middleware.ApiExactPathsCommonMiddleware",  # CommonMiddleware, minus APPEND_SLASH for /api
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "quests.middleware.HtmxSessionEndedMiddleware",
    "quests.middleware.PersonTimeZoneMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as axes asks: it turns a lockout into our login page
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "quests.context_processors.navigation",
            ],
        },
    },
]

# SQLite in the data dir by default; PostgreSQL keeps its connections (persistent, or a psycopg pool
# when QUESTLOG_DB_POOL_SIZE > 0): see config/database.py. A statement is cancelled after
# QUESTLOG_DB_STATEMENT_TIMEOUT seconds (PostgreSQL), a writer waits QUESTLOG_DB_BUSY_TIMEOUT seconds
# for SQLite's write lock, and no request starts a statement after QUESTLOG_REQUEST_TIMEOUT seconds
# (quests.middleware.RequestDeadlineMiddleware); all answer 503 `unavailable` with nothing written.
# Keep them below QUESTLOG_WEB_TIMEOUT (config/gunicorn.py).
DATABASES = {"default": default_database(os.environ, f"sqlite:///{DATA_DIR / 'questlog.sqlite3'}")}
QUESTLOG_REQUEST_TIMEOUT = env_int("QUESTLOG_REQUEST_TIMEOUT", 20)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("QUESTLOG_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# The API enforces its own body limit (QUESTLOG_MAX_BODY_BYTES) with a JSON 413; Django's own
# limit would answer 400 with an HTML page, so it is set to the largest body the API ever takes.
QUESTLOG_MAX_BODY_BYTES = env_int("QUESTLOG_MAX_BODY_BYTES", 1024 * 1024)
QUESTLOG_MAX_TOOL_OUTPUT_BYTES = env_int("QUESTLOG_MAX_TOOL_OUTPUT_BYTES", 10 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(QUESTLOG_MAX_BODY_BYTES, QUESTLOG_MAX_TOOL_OUTPUT_BYTES) + 64 * 1024

QUESTLOG_HEARTBEAT_TIMEOUT = env_int("QUESTLOG_HEARTBEAT_TIMEOUT", 60)
QUESTLOG_ACTIVE_NOTES = env_int("QUESTLOG_ACTIVE_NOTES", 20)
QUESTLOG_PREVIEW_CHARS = env_int("QUESTLOG_PREVIEW_CHARS", 280)
QUESTLOG_SNAPSHOT_INTERVAL = env_int("QUESTLOG_SNAPSHOT_INTERVAL", 10)
QUESTLOG_SNAPSHOT_SWEEP_INTERVAL = env_int("QUESTLOG_SNAPSHOT_SWEEP_INTERVAL", 30)
# A snapshot request published but not run, or claimed by a worker silent for this long, is
# published again by the sweep (a snapshot takes milliseconds; this only has to outlive a slow one).
QUESTLOG_SNAPSHOT_STALE_AFTER = env_int("QUESTLOG_SNAPSHOT_STALE_AFTER", 60)
QUESTLOG_STALLED_SWEEP_INTERVAL = env_int("QUESTLOG_STALLED_SWEEP_INTERVAL", 15)
QUESTLOG_APPROVAL_EXPIRY_INTERVAL = env_int("QUESTLOG_APPROVAL_EXPIRY_INTERVAL", 30)
QUESTLOG_MAINTENANCE_INTERVAL = env_int("QUESTLOG_MAINTENANCE_INTERVAL", 3600)
# How long (seconds) a person may take back an approval decision, as long as no run has started
# since: a slip of the finger is undone before the agent acts on it (quests/services/approvals.py).
QUESTLOG_UNDO_SECONDS = env_int("QUESTLOG_UNDO_SECONDS", 60)

# How often (seconds) an open page asks whether what it shows changed. "mission": a running
# mission (its agent writes every few seconds); "mission_idle": a mission an agent may pick up at
# any moment (ready, blocked); "board" and "board_idle": the board, on the same rule
# (quests/web/live.py); "inbox": the navigation's badge on every page. A hidden tab asks nothing
# (static/js/questlog.js). The browser tests shorten them.
QUESTLOG_POLL_SECONDS = {"mission": 3, "mission_idle": 15, "board": 4, "board_idle": 15, "inbox": 15}

# Notifications (README: "Notifications"). Mail settings come from one URL (config/email.py); links
# in mails and webhooks start with QUESTLOG_BASE_URL, the address people open Questlog at.
# The default: printed in the terminal while developing (`make run`); with DEBUG off, the local
# mail server, as Django's own default (check --deploy refuses the console backend there).
QUESTLOG_EMAIL_URL = os.environ.get("QUESTLOG_EMAIL_URL") or ("console:" if DEBUG else "smtp://localhost:25")
MAILERS = mailers(QUESTLOG_EMAIL_URL, DATA_DIR)
DEFAULT_FROM_EMAIL = QUESTLOG_EMAIL_FROM = os.environ.get("QUESTLOG_EMAIL_FROM", "Questlog <questlog@localhost>")
QUESTLOG_BASE_URL = os.environ.get("QUESTLOG_BASE_URL", "http://localhost:8000").rstrip("/")
# Webhooks to loopback, private, link-local or metadata addresses are refused unless this is on
# (a development machine, the tests' own receivers).
QUESTLOG_WEBHOOK_ALLOW_PRIVATE = env_bool("QUESTLOG_WEBHOOK_ALLOW_PRIVATE", False)
QUESTLOG_WEBHOOK_TIMEOUT = env_int("QUESTLOG_WEBHOOK_TIMEOUT", 5)
QUESTLOG_WEBHOOK_MAX_RESPONSE_BYTES = env_int("QUESTLOG_WEBHOOK_MAX_RESPONSE_BYTES", 16 * 1024)
# A delivery is retried with exponential backoff (30 s doubling, at most 3 h apart) and given up
# this long after its first attempt; an endpoint failing for as long is disabled.
QUESTLOG_NOTIFY_GIVE_UP_AFTER = env_int("QUESTLOG_NOTIFY_GIVE_UP_AFTER", 24 * 3600)
QUESTLOG_NOTIFY_BACKOFF = env_int("QUESTLOG_NOTIFY_BACKOFF", 30)
QUESTLOG_NOTIFY_BACKOFF_MAX = env_int("QUESTLOG_NOTIFY_BACKOFF_MAX", 3 * 3600)
# How long a worker holds a delivery it sends: longer than any send may take. One that died
# mid-send lets go after this, and the sweep publishes the delivery again.
QUESTLOG_NOTIFY_LEASE = env_int("QUESTLOG_NOTIFY_LEASE", 60)
QUESTLOG_NOTIFY_SWEEP_INTERVAL = env_int("QUESTLOG_NOTIFY_SWEEP_INTERVAL", 60)
# approval.expiring: this many seconds before an approval's respond-by time.
QUESTLOG_APPROVAL_EXPIRING_BEFORE = env_int("QUESTLOG_APPROVAL_EXPIRING_BEFORE", 24 * 3600)
QUESTLOG_APPROVAL_EXPIRING_INTERVAL = env_int("QUESTLOG_APPROVAL_EXPIRING_INTERVAL", 300)
QUESTLOG_DIGEST_HOUR = env_int("QUESTLOG_DIGEST_HOUR", 8)

# Celery: Redis in production; a broker that needs no server (kombu's filesystem transport)
# as the embedded default so `make run` works on a fresh machine.
_broker_dir = DATA_DIR / "broker"
for _sub in ("in", "processed", "control"):
    (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "in"),
        "data_folder_out": str(_broker_dir / "in"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # An unacknowledged message (its worker died) is delivered again after this long; the
        # snapshot sweep usually gets there first.
        "visibility_timeout": env_int("QUESTLOG_BROKER_VISIBILITY_TIMEOUT", 3600),
        # A publish to a broker that is down must fail fast: the request row in the database is
        # the source of truth and the sweep publishes it later, so the API never waits on the
        # broker. Without these, kombu retries the connection for seconds on every publish.
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.5,
        "socket_connect_timeout": 2,
        "socket_timeout": 5,
    }
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_PUBLISH_RETRY = False
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Two queues, so that workers can be given to each: snapshots are many and short, maintenance
# (sweeps, expiry, pruning) is periodic and may be long. Both are declared: a worker started
# without -Q consumes the declared queues, and with only the default one declared a plain
# `celery -A config worker` silently never took a snapshot. `-Q` still selects among them.
CELERY_TASK_DEFAULT_QUEUE = "maintenance"
# Each with its own exchange and routing key: a bare Queue(name) would be bound to the default
# exchange with the default key, and a snapshot would then be delivered to both queues.
# A third, `notifications`, holds deliveries: a mail server or webhook that is slow to answer
# never holds a snapshot up, and a long pruning pass never holds a person's email up.
CELERY_TASK_QUEUES = tuple(Queue(name, Exchange(name), routing_key=name) for name in ("snapshots", "maintenance", "notifications"))
CELERY_TASK_ROUTES = {
    "quests.tasks.snapshot_take_task": {"queue": "snapshots"},
    "quests.tasks.*": {"queue": "maintenance"},
    "notifications.tasks.delivery_send_task": {"queue": "notifications"},
    "notifications.tasks.*": {"queue": "maintenance"},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# The daily digest's hour is read in the server's zone, as every other setting's time is.
CELERY_TIMEZONE = TIME_ZONE


def _every(task: str, seconds: int) -> dict:
    # A periodic message that no worker ran before the next one is due is dropped, not piled up.
    return {"task": task, "schedule": timedelta(seconds=seconds), "options": {"expires": seconds}}


CELERY_BEAT_SCHEDULE = {
    "sweep-snapshot-requests": _every("quests.tasks.snapshots_sweep_task", QUESTLOG_SNAPSHOT_SWEEP_INTERVAL),
    "sweep-stalled-runs": _every("quests.tasks.stalled_runs_sweep_task", QUESTLOG_STALLED_SWEEP_INTERVAL),
    "expire-approvals": _every("quests.tasks.approvals_expire_task", QUESTLOG_APPROVAL_EXPIRY_INTERVAL),
    "prune-snapshots": _every("quests.tasks.snapshots_prune_task", QUESTLOG_MAINTENANCE_INTERVAL),
    "purge-expired": _every("quests.retention.tasks.purge_expired_task", QUESTLOG_MAINTENANCE_INTERVAL),
    "sweep-deliveries": _every("notifications.tasks.deliveries_sweep_task", QUESTLOG_NOTIFY_SWEEP_INTERVAL),
    "approvals-expiring": _every("notifications.tasks.approvals_expiring_task", QUESTLOG_APPROVAL_EXPIRING_INTERVAL),
    # Once a day at QUESTLOG_DIGEST_HOUR (in TIME_ZONE); a digest per person per day at most.
    "daily-digest": {
        "task": "notifications.tasks.digests_send_task",
        "schedule": crontab(minute=0, hour=QUESTLOG_DIGEST_HOUR),
        "options": {"expires": 3600},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("QUESTLOG_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # `/mcp` runs the MCP SDK's handler once per request (quests/api/mcp_http.py): its start and
        # stop lines would be two lines of noise for every tool call.
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
    },
}

# Throttling (README: "Throttling"). Failed logins are counted by django-axes in the database, per
# account and per address separately; reaching the limit on either pauses logging in for the
# cool-off, which ends by itself and starts again with each failure during it.
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
# At least a minute: a zero cool-off would make axes lock out for good.
AXES_COOLOFF_TIME = timedelta(minutes=max(1, env_int("AXES_COOLOFF_MINUTES", 15)))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# Lockouts are logged; the banner axes prints at every start would land in every command's output.
AXES_VERBOSE = False
# The count starts over once a cool-off has passed since the last failure. A successful login
# does not clear it (AXES_RESET_ON_SUCCESS): it would clear its address's count too, so one valid
# account would let a guesser go on from the same address.
AXES_LOCKOUT_CALLABLE = "quests.web.login.lockout_response"
AXES_CLIENT_IP_CALLABLE = "quests.web.login.client_address"
QUESTLOG_PROXY_COUNT = env_int("QUESTLOG_PROXY_COUNT", 0)
AUTHENTICATION_BACKENDS = [
    "quests.web.login.LoginThrottleBackend",  # first: a locked-out login never reaches the password check
    "django.contrib.auth.backends.ModelBackend",
]

# Password reset by email: on once a mail server is configured (QUESTLOG_EMAIL_URL set), else off
# (its pages are not routed, nothing links to them): without one they would promise a mail that
# never comes. When on, requests per hour per address and per account (0: no limit).
QUESTLOG_PASSWORD_RESET = env_bool("QUESTLOG_PASSWORD_RESET", bool(os.environ.get("QUESTLOG_EMAIL_URL")))
QUESTLOG_PASSWORD_RESET_RATE = env_int("QUESTLOG_PASSWORD_RESET_RATE", 5)

# API requests per minute per agent token (0: no limit), counted in the cache below.
QUESTLOG_API_RATE = api_rate(os.environ)

# The cache holds the throttles' counts, and must be one that every web process shares:
# QUESTLOG_CACHE_URL, else Redis when the broker is Redis, else this process's memory (the embedded
# development default; `make serve` makes it the database's cache table). See config/cache.py.
CACHES = cache_settings(os.environ)
