"""How each process talks to the database: the `default` entry of DATABASES, built from the
environment by one function so that tests can check it without reloading Django.

PostgreSQL connections are expensive to open (a new backend process, authentication, several
round trips): opening one per request measured at half the throughput of reusing them. So every
process keeps its connections, either as Django's persistent connections (one per thread, closed
after QUESTLOG_DB_CONN_MAX_AGE seconds or when a health check at the start of a request or task
finds it broken; a connection that answered less than QUESTLOG_DB_HEALTH_CHECK_WINDOW seconds ago
skips the check, see config/postgresql/base.py) or, when QUESTLOG_DB_POOL_SIZE > 0, as a psycopg pool per process that the threads
share (the pool checks a connection before handing it out).

Every request has a deadline (issue 24): a statement that runs longer than
QUESTLOG_DB_STATEMENT_TIMEOUT seconds is cancelled by PostgreSQL, and a SQLite writer waits at most
QUESTLOG_DB_BUSY_TIMEOUT seconds for the write lock; either way the request answers 503
`unavailable` and its transaction is rolled back (quests.api). The statement timeout is set when
the connection opens (no extra round trip) and spares Celery processes and `migrate`, whose batches
and schema changes have no client waiting on them; quests.middleware.RequestDeadlineMiddleware
bounds a request's statements taken together.

Celery's prefork workers fork after the settings are loaded, and a pool (its sockets and its
threads) must not cross a fork; Celery's Django fixup also closes the pool around every task, which
would open a fresh pool per task. Celery processes therefore never pool: they use persistent
connections with health checks (see config/celery.py).
"""

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import dj_database_url

from config.deploy import env_int


def env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    value = environ.get(name)
    return float(value) if value not in (None, "") else default


def is_celery_process(argv: list[str]) -> bool:
    """`celery …` and `python -m celery …` (argv[0] is then celery/__main__.py)."""
    if not argv:
        return False
    program = Path(argv[0])
    return program.name == "celery" or (program.name == "__main__.py" and program.parent.name == "celery")


def is_schema_migration(argv: list[str]) -> bool:
    """`manage.py migrate …`: a schema change may rewrite a big table for longer than any request may last."""
    return len(argv) > 1 and Path(argv[0]).name == "manage.py" and argv[1] == "migrate"


def database_settings(environ: Mapping[str, str], default_url: str, *, may_pool: bool, deadline: bool = True) -> dj_database_url.DBConfig:
    config = dj_database_url.parse(environ.get("DATABASE_URL") or default_url, conn_max_age=0)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # SQLite as the embedded default is set up for a web server and a worker writing at once:
        # WAL lets readers proceed during a write, IMMEDIATE takes the write lock at BEGIN (so two
        # writers queue instead of failing on lock upgrade), and the busy timeout makes the queue wait
        # (a writer that waits longer answers 503 rather than holding its worker).
        # Opening a SQLite file is cheap, so its connections stay per request.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": env_int(environ, "QUESTLOG_DB_BUSY_TIMEOUT", 10),
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        }
        return config
    config.setdefault("TEST", {})
    # Django's backend, with a health check that a connection in steady use skips (config/postgresql).
    config["ENGINE"] = "config.postgresql"
    statement_timeout = env_int(environ, "QUESTLOG_DB_STATEMENT_TIMEOUT", 10)
    if deadline and statement_timeout > 0:
        options = config.setdefault("OPTIONS", {})
        # libpq's startup options: the server applies them as the session opens.
        options["options"] = f"{options.get('options', '')} -c statement_timeout={statement_timeout * 1000}".strip()
    # Every query binds its parameters server-side (QUESTLOG_DB_SERVER_SIDE_BINDING=0: Django's
    # client-side binding), so psycopg can prepare it: the storage engine's fixed statements the
    # first time they run (quests/engine/runner.py), Django's own once the same text has run
    # QUESTLOG_DB_PREPARE_THRESHOLD times on the connection (psycopg's default, 5). A page's
    # fixed-shape queries are then parsed and planned once per connection, not on every view: the
    # mission page 42.1 -> 37.8 ms in process (bench/profile_page.py). Not at the first run: a
    # migration's statement may hold several commands, which cannot be prepared, and runs once.
    # A negative threshold turns preparing off, the engine's too (a pooler in transaction mode
    # cannot keep prepared statements).
    prepare = env_int(environ, "QUESTLOG_DB_PREPARE_THRESHOLD", 5)
    options = config.setdefault("OPTIONS", {})
    options.setdefault("prepare_threshold", prepare if prepare >= 0 else None)
    options.setdefault("server_side_binding", env_int(environ, "QUESTLOG_DB_SERVER_SIDE_BINDING", 1) != 0)
    pool_size = env_int(environ, "QUESTLOG_DB_POOL_SIZE", 0)
    if may_pool and pool_size > 0:
        from psycopg_pool import ConnectionPool

        # Django requires CONN_MAX_AGE = 0 with a pool: "closing" a connection returns it to the pool.
        config["CONN_MAX_AGE"] = 0
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env_int(environ, "QUESTLOG_DB_POOL_MIN_SIZE", 2), pool_size),
            "max_size": pool_size,
            # A request waiting longer than this for a connection fails instead of queueing forever.
            "timeout": env_int(environ, "QUESTLOG_DB_POOL_TIMEOUT", 10),
            "check": ConnectionPool.check_connection,
        }
    else:
        config["CONN_MAX_AGE"] = env_int(environ, "QUESTLOG_DB_CONN_MAX_AGE", 300)
        config["CONN_HEALTH_CHECKS"] = True
        # A key of ours (config/postgresql/base.py), which dj_database_url's type does not declare.
        cast(dict[str, Any], config)["HEALTH_CHECK_WINDOW"] = env_float(environ, "QUESTLOG_DB_HEALTH_CHECK_WINDOW", 0.5)
    return config


def default_database(environ: Mapping[str, str], default_url: str) -> dj_database_url.DBConfig:
    celery = is_celery_process(sys.argv)
    return database_settings(environ, default_url, may_pool=not celery, deadline=not (celery or is_schema_migration(sys.argv)))
