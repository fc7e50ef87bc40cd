"""Django's cache, where the throttles count (the API's rate per agent token, password-reset
requests): one that every web process shares, or the counts are per process and a limit of N
lets N × workers through.

QUESTLOG_CACHE_URL chooses it: `redis://…` (or `rediss://`), `db://` (Django's database cache, in
the application's own database) or `locmem://` (this process's memory: one process only). Unset,
it is Redis when the Celery broker is Redis, else `locmem://`, which suits `make run`'s single
development server; `make serve` (scripts/serve) makes it `db://` then, and config/gunicorn.py
refuses to start several workers with a per-process cache while a throttle is on.

Kept apart from config/settings.py, as config/deploy.py is, so that config/gunicorn.py can judge the
environment without loading Django's settings in the arbiter.
"""

import base64
import pickle
from collections.abc import Mapping
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.db import DatabaseCache
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction
from django.utils.timezone import now

from config.deploy import env_flag

PER_PROCESS_BACKEND = "django.core.cache.backends.locmem.LocMemCache"
DATABASE_TABLE = "questlog_cache"
DEFAULT_API_RATE = 6000


def api_rate(environ: Mapping[str, str]) -> int:
    """QUESTLOG_API_RATE: API requests per minute per agent token (0: no limit)."""
    value = environ.get("QUESTLOG_API_RATE")
    return int(value) if value not in (None, "") else DEFAULT_API_RATE


def cache_url(environ: Mapping[str, str]) -> str:
    url = environ.get("QUESTLOG_CACHE_URL", "").strip()
    if url:
        return url
    broker = environ.get("CELERY_BROKER_URL", "")
    return broker if broker.startswith(("redis://", "rediss://")) else "locmem://"


def cache_settings(environ: Mapping[str, str]) -> dict:
    """CACHES for this environment."""
    url = cache_url(environ)
    if url.startswith(("redis://", "rediss://")):
        return {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": url,
                "KEY_PREFIX": "questlog-cache",
                # Fail fast when Redis is away: the throttles then let requests through uncounted.
                "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
            }
        }
    if url == "db://":
        return {
            "default": {
                "BACKEND": "config.cache.CountingDatabaseCache",
                "LOCATION": DATABASE_TABLE,
                # Django culls a third of the entries past MAX_ENTRIES (300 by default), live counts
                # included; a count is only ever a few keys per token, so culling must be rare.
                "OPTIONS": {"MAX_ENTRIES": 100_000},
            }
        }
    if url == "locmem://":
        return {"default": {"BACKEND": PER_PROCESS_BACKEND}}
    raise ImproperlyConfigured(f"QUESTLOG_CACHE_URL={url!r}: expected redis://…, rediss://…, db:// or locmem://.")


def throttling_on(environ: Mapping[str, str]) -> bool:
    return api_rate(environ) > 0 or env_flag(environ, "QUESTLOG_PASSWORD_RESET", False)


def per_process_cache_refusal(environ: Mapping[str, str], workers: int) -> str | None:
    """Why several web processes may not start with this environment, or None."""
    if workers <= 1 or not throttling_on(environ):
        return None
    if cache_settings(environ)["default"]["BACKEND"] != PER_PROCESS_BACKEND:
        return None
    return (
        f"Refusing to start: {workers} web workers would each count the throttles (QUESTLOG_API_RATE) in their own "
        "memory, letting that many times the limit through; set QUESTLOG_CACHE_URL to redis://… or db:// "
        "(and run `manage.py createcachetable`), or QUESTLOG_WEB_WORKERS=1, or QUESTLOG_API_RATE=0."
    )


class CountingDatabaseCache(DatabaseCache):
    """Django's database cache, with an incr() that no other process can interleave with.

    Django's own incr() reads the value and writes it back: two processes counting the same key at
    once both write the same number, and a request goes uncounted. Here the row is locked for the
    read and the write (SELECT … FOR UPDATE on PostgreSQL; on SQLite the transaction itself, which
    config/database.py makes IMMEDIATE, takes the database's write lock first)."""

    _table: str  # DatabaseCache sets it from LOCATION; django-stubs does not declare it

    def incr(self, key, delta=1, version=None):
        key = self.make_and_validate_key(key, version=version)
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        quote = connection.ops.quote_name
        table = quote(self._table)
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        # As Django's has_key() compares expiry times: to the second, without a time zone.
        current = connection.ops.adapt_datetimefield_value(now().replace(microsecond=0, tzinfo=None))
        with transaction.atomic(using=db), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {quote('value')} FROM {table} WHERE {quote('cache_key')} = %s AND {quote('expires')} > %s{lock}",
                [key, current],
            )
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key '{key}' not found")
            value = pickle.loads(base64.b64decode(connection.ops.process_clob(row[0]).encode(), validate=True)) + delta
            stored = base64.b64encode(pickle.dumps(value, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET {quote('value')} = %s WHERE {quote('cache_key')} = %s", [stored, key])
        return value

    def count(self, key: str, timeout: int) -> int:
        """Counts one more on `key` and returns the count, in one statement (an upsert that
        returns the new value), outside any transaction of its own: the row is locked only for
        that statement. A key that has expired starts again at 1.

        The count is kept as decimal text, not pickled as set() keeps values, so that the database
        adds to it itself: a counted key is read with count(), never with get()."""
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        # Inside a transaction (a test's, a caller's), a savepoint keeps a failed count (a key
        # set() pickled) from breaking it; outside one the statement commits by itself.
        guard = transaction.atomic(using=db) if connection.in_atomic_block else nullcontext()
        with guard, connection.cursor() as cursor:
            cursor.execute(self.count_statement(), self.count_params(key, timeout))
            return int(cursor.fetchone()[0])

    def count_statement(self, row: str = "VALUES (%(count_key)s, '1', %(count_expires)s)") -> str:
        """count()'s upsert, with named parameters (count_params): one more on a key, returning
        the new count. `row` gives the row to insert when the key is new, in place of VALUES: a
        statement of the caller's can count inside its own round trip with `SELECT %(count_key)s,
        '1', %(count_expires)s FROM …` (the storage engine does, to count an agent's request in the
        statement that authenticates its token)."""
        quote = connections[router.db_for_write(self.cache_model_class)].ops.quote_name
        table, value, expires = quote(self._table), quote("value"), quote("expires")
        live = f"{table}.{expires} > %(count_now)s"
        return (
            f"INSERT INTO {table} ({quote('cache_key')}, {value}, {expires}) {row} "
            f"ON CONFLICT ({quote('cache_key')}) DO UPDATE SET "
            f"{value} = CASE WHEN {live} THEN CAST(CAST({table}.{value} AS INTEGER) + 1 AS TEXT) ELSE '1' END, "
            f"{expires} = CASE WHEN {live} THEN {table}.{expires} ELSE EXCLUDED.{expires} END "
            f"RETURNING {value}"
        )

    def count_params(self, key: str, timeout: int) -> dict[str, Any]:
        connection = connections[router.db_for_write(self.cache_model_class)]
        adapt = connection.ops.adapt_datetimefield_value
        # As incr() compares expiry times: to the second, without a time zone.
        current = now().replace(microsecond=0, tzinfo=None)
        return {"count_key": self.make_and_validate_key(key), "count_expires": adapt(current + timedelta(seconds=timeout)), "count_now": adapt(current)}


def count(cache: BaseCache, key: str, timeout: int) -> int:
    """Counts one more on `key` (made with this count, lasting `timeout` seconds from the first)
    and returns the count, in as few round trips as the cache allows: every request a throttle
    counts pays this.

    Redis: INCR and EXPIRE NX pipelined, one round trip (the key is given its expiry only when it
    has none, so a window's key never outlives it however often it is counted). The database's
    cache: one upsert (CountingDatabaseCache.count). Any other cache (this process's memory):
    incr(), or add() for the first of the window."""
    if isinstance(cache, RedisCache):
        key = cache.make_and_validate_key(key)
        pipeline = cache._cache.get_client(key, write=True).pipeline(transaction=False)
        pipeline.incr(key)
        pipeline.expire(key, timeout, nx=True)
        counted, _ = pipeline.execute()
        return counted
    if isinstance(cache, CountingDatabaseCache):
        return cache.count(key, timeout)
    try:
        return cache.incr(key)
    except ValueError:
        # The first of the window. add() is atomic: of two first requests at once, the one that
        # loses it counts itself on the key the other made.
        return 1 if cache.add(key, 1, timeout=timeout) else cache.incr(key)
