"""What `make serve` does once before taking requests, so that no agent's first call to a fresh
worker pays for it (it took 1.5 s: the URL configuration's imports, the API's routes, the OpenAPI
document, a database connection per thread).

gunicorn (config/gunicorn.py) loads the application in the arbiter (preload_app), then:

- in_arbiter(): imports the URL configuration with every view and builds the OpenAPI document,
  once, in memory the forked workers share;
- before_fork(): closes every database connection the arbiter opened doing so, so that no
  connection is ever shared across processes (a forked socket answers two processes at once);
- before_fork() also moves every object the arbiter made (the loaded application, about 140,000)
  out of the garbage collector's sight (`gc.freeze()`, as Python's documentation advises before a
  fork): a worker's full collection then scans only what the worker made itself. Without it, each
  full collection scanned them all, 35-40 ms of CPU in one go (measured in a process with the
  application loaded), during which the worker's every request thread waits for the GIL;
- in_worker(): in each worker, before it accepts, opens the database connection of each of its
  request threads (Django's connections are per thread) and resolves a path once more.

Kept apart from config/gunicorn.py so that its functions can be called and tested without gunicorn.
"""

import gc
import logging
import threading
from concurrent.futures import Executor

from django.db import connections
from django.urls import get_resolver

log = logging.getLogger(__name__)

# The longest a worker waits for its threads to connect before it takes requests anyway: a warm-up
# must never keep a worker from serving (the database may be slow to answer, or away).
WARM_SECONDS = 10


def in_arbiter() -> None:
    from quests.api import api

    get_resolver().resolve("/api/v1/missions")  # imports config.urls and everything it routes to
    api.get_openapi_schema(path_params={})  # as /api/v1/openapi.json asks for it


def before_fork() -> None:
    connections.close_all()
    gc.freeze()  # after each fork's predecessor too: what the arbiter made since is frozen as well
    for alias in connections:
        # A psycopg pool (QUESTLOG_DB_POOL_SIZE) keeps its connections and its threads, neither of
        # which survives a fork: a worker must make its own. (Only one already made: asking for
        # `.pool` would make one.)
        if alias in getattr(connections[alias], "_connection_pools", {}):
            connections[alias].close_pool()  # type: ignore[attr-defined]  # PostgreSQL's wrapper only


def in_worker(pool: Executor | None, threads: int) -> None:
    """Connects each of the `threads` threads of `pool` (a gthread worker's) to the database, or
    this thread's connection when there is no pool. A thread that cannot connect is logged, not
    fatal: its first request connects (or answers 503) as it would have without the warm-up."""
    get_resolver().resolve("/api/v1/missions")
    if pool is None:
        _connect(None)
        return
    # Every task waits at the barrier until all have started, so each runs on a thread of its own.
    together = threading.Barrier(threads)
    done = [pool.submit(_connect, together) for _ in range(threads)]
    for future in done:
        future.result(timeout=WARM_SECONDS + 1)


def _connect(together: threading.Barrier | None) -> None:
    try:
        if together is not None:
            together.wait(timeout=WARM_SECONDS)
        for alias in connections:
            connections[alias].ensure_connection()
    except Exception as exc:  # noqa: BLE001 - whatever the database or the barrier says; see in_worker
        log.warning("A request thread was not warmed up (its first request connects): %s", exc)
