"""gunicorn's configuration for `make serve` (scripts/serve), read from the environment.

Threaded workers (gthread), one process per CPU with two threads each by default: while one
thread waits on PostgreSQL the other computes, and no more Python runs at once than there are
CPUs to run it. Measured on a 2-CPU machine with bench/load.py (8 agents and a person, one
process per CPU against the former 2 × CPUs + 1 processes of 4 threads): the same requests/s,
the agents' calls as fast, and the person's pages no longer time-sliced among five processes
(mission page p99 98-153 ms over seven runs against 139-234 ms over three, each configuration
run on the same two versions of the code). The app is loaded once, in the arbiter (preload_app),
and warmed up there and in each worker before it accepts (config/warmup.py), so that no agent's
first call to a fresh worker pays for imports and connections. The arbiter's database connections
are closed before each fork: each process opens its own, so no connection or psycopg pool is ever shared across processes. With
QUESTLOG_DB_POOL_SIZE > 0, give the pool at least as many connections as a worker has threads.
"""

import os
import sys

from config import warmup
from config.cache import per_process_cache_refusal
from config.deploy import bind_addresses, env_int, secret_key_refusal, web_threads, web_workers

# Refused here, in the arbiter, with one line: a worker that failed to load the settings would
# only say so in a traceback.
if refusal := secret_key_refusal(os.environ):
    sys.exit(refusal)


wsgi_app = "config.wsgi:application"
preload_app = True
bind = bind_addresses(os.environ)
worker_class = "gthread"
workers = web_workers(os.environ)
# Several workers counting the throttles each in their own memory would let workers × the limit
# through: refused here, before any worker boots (scripts/serve picks a shared cache by default).
if refusal := per_process_cache_refusal(os.environ, workers):
    sys.exit(refusal)
threads = web_threads(os.environ)
# A worker silent this long is killed and replaced. A gthread worker stays alive while one of its
# threads is busy, so one request is bounded by the database deadlines and QUESTLOG_REQUEST_TIMEOUT
# (config/database.py), which are kept below this.
timeout = env_int(os.environ, "QUESTLOG_WEB_TIMEOUT", 30)
graceful_timeout = timeout
# Behind a reverse proxy that keeps connections open to us.
keepalive = 5
accesslog = "-" if os.environ.get("QUESTLOG_WEB_ACCESS_LOG", "1") not in ("0", "false", "no", "off") else None
errorlog = "-"
loglevel = os.environ.get("QUESTLOG_LOG_LEVEL", "INFO").lower()


def when_ready(server) -> None:
    warmup.in_arbiter()


def pre_fork(server, worker) -> None:
    warmup.before_fork()


def post_worker_init(worker) -> None:
    warmup.in_worker(getattr(worker, "tpool", None), threads)
