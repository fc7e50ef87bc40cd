"""Counts in fixed windows, kept in Django's cache: the API's rate limit per agent token (a minute)
and the password-reset requests per address and per account (an hour).

The counts live in the cache that every web process shares (config/cache.py: Redis, or the
database's cache table under `make serve` without Redis). With Redis a counted request costs no
database query; with the database's cache on PostgreSQL an agent's request is counted by the
engine statement that authenticates its token (`api_counting`), so it costs no round trip of its
own either, and the fast path's query budgets hold."""

import hashlib
import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django.db import connections, router

from config.cache import CountingDatabaseCache, count
from quests.engine import writes
from quests.services.errors import RateLimited

WINDOW_SECONDS = 60
PASSWORD_RESET_WINDOW_SECONDS = 3600
log = logging.getLogger(__name__)


def api_request_count(token_hash: str, *, receipt: bool, counted: "Counting | None" = None) -> None:
    """Counts one request of the token and raises RateLimited past QUESTLOG_API_RATE a minute;
    `counted`: the count was taken already, in the statement that authenticated the token
    (`api_counting`).

    Receipts (an operation's complete, fail or observe) are counted but never refused: their side
    effect already happened in the world, and refusing the receipt would only lose its record."""
    rate = settings.QUESTLOG_API_RATE
    if rate <= 0:
        return
    if counted is not None and counted.value is not None:
        retry_after = _past_rate(counted.value, rate, counted.window, counted.at)
    else:
        retry_after = _over_rate(_api_key(token_hash), rate, WINDOW_SECONDS)
    if retry_after and not receipt:
        raise RateLimited(retry_after)


@dataclass
class Counting(writes.Count):
    """One agent request's count in the database's cache, taken by the engine's statement that
    authenticates its token (`value`: None when the token was not valid), in the window it opened."""

    window: int = 0
    at: float = 0.0


def api_counting(token_hash: str) -> Counting | None:
    """When the API's rate is counted in the database's own cache on PostgreSQL, what the token's
    authentication runs to count the request in its own round trip; otherwise None (the request
    is counted on its own by api_request_count: Redis, this process's memory, or SQLite)."""
    if settings.QUESTLOG_API_RATE <= 0:
        return None
    cache = caches["default"]
    if not isinstance(cache, CountingDatabaseCache) or connections[router.db_for_write(cache.cache_model_class)].vendor != "postgresql":
        return None
    at, window, key = _in_window(_api_key(token_hash), WINDOW_SECONDS)
    return Counting(upsert=cache.count_statement, params=cache.count_params(key, _key_lasts(WINDOW_SECONDS)), window=window, at=at)


def _api_key(token_hash: str) -> str:
    # The token's hash, not its id: ids repeat across databases sharing one cache (test workers,
    # a staging copy), the hash of a random secret does not.
    return f"questlog:api-rate:{token_hash}"


def password_reset_count(address: str | None, email: str) -> None:
    """Counts one password-reset request from this address for this account (the email address
    asked about, whether or not an account has it) and raises RateLimited past
    QUESTLOG_PASSWORD_RESET_RATE an hour for either: every request sends mail, so without a limit
    anyone could fill a person's inbox, or the server's mail quota, from anywhere."""
    rate = settings.QUESTLOG_PASSWORD_RESET_RATE
    if rate <= 0:
        return
    # Both are counted, whichever runs over: a refused request still counts against the other.
    over = [
        _over_rate(f"questlog:password-reset:{kind}:{value}", rate, PASSWORD_RESET_WINDOW_SECONDS)
        for kind, value in (("address", address or "unknown"), ("account", _account_key(email)))
    ]
    if retry_after := max(over):
        minutes = max(1, math.ceil(retry_after / 60))
        raise RateLimited(
            retry_after,
            f"Too many password-reset requests for this account or from this address; try again in {minutes} minute{'s' if minutes != 1 else ''}.",
        )


def _account_key(email: str) -> str:
    # A hash, so that no address asked about is kept in the cache in clear; case-folded, as
    # PasswordResetForm matches addresses without regard to case.
    return hashlib.sha256(email.strip().casefold().encode()).hexdigest()


def _over_rate(key: str, rate: int, window_seconds: int) -> int:
    """Counts one request in the current window of `key`: the seconds until the next window when
    the count is past `rate`, else 0."""
    now, window, windowed = _in_window(key, window_seconds)
    try:
        count = _count(windowed, window_seconds)
    except Exception as exc:  # noqa: BLE001 - whatever the cache backend raises when it is unreachable
        # The limit protects the server; it is not worth refusing work for. With the cache (Redis)
        # down the request goes through uncounted, as a publish to a broker that is down does.
        log.warning("Request not counted (the cache is unavailable): %s", exc)
        return 0
    return _past_rate(count, rate, window, now, window_seconds)


def _in_window(key: str, window_seconds: int) -> tuple[float, int, str]:
    """Now, the number of the window now is in, and `key`'s count in that window."""
    now = time.time()
    window = int(now // window_seconds)
    return now, window, f"{key}:{window}"


def _past_rate(count: int, rate: int, window: int, now: float, window_seconds: int = WINDOW_SECONDS) -> int:
    """The seconds until the next window when `count` is past `rate`, else 0."""
    if count > rate:
        return max(1, math.ceil((window + 1) * window_seconds - now))
    return 0


def _count(key: str, window_seconds: int) -> int:
    # One cache call (config/cache.count: one round trip on Redis and on the database). The key
    # outlives its window a little (_key_lasts) so that a late request of the window never opens it again.
    # caches[…], not django.core.cache.cache: count() tells the backends apart, the proxy hides them.
    return count(caches["default"], key, _key_lasts(window_seconds))


def _key_lasts(window_seconds: int) -> int:
    return window_seconds + 5
