"""The API's rate limit per agent token: a fixed one-minute window counted in Django's cache.

The count lives in the cache (Redis in production, local memory in the embedded setup), never in
the database, so a throttled request costs no query and the fast path's query budgets hold."""

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

from quests.services.errors import RateLimited

WINDOW_SECONDS = 60
log = logging.getLogger(__name__)


def api_request_count(token_hash: str, *, receipt: bool) -> None:
    """Counts one request of the token and raises RateLimited past QUESTLOG_API_RATE a minute.

    Receipts (an operation's complete, fail or observe) are counted but never refused: their side
    effect already happened in the world, and refusing the receipt would only lose its record."""
    rate = settings.QUESTLOG_API_RATE
    if rate <= 0:
        return
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    # The token's hash, not its id: ids repeat across databases sharing one cache (test workers,
    # a staging copy), the hash of a random secret does not.
    key = f"questlog:api-rate:{token_hash}:{window}"
    try:
        count = _count(key)
    except Exception as exc:  # noqa: BLE001 - whatever the cache backend raises when it is unreachable
        # The limit protects the server; it is not worth refusing work for. With the cache (Redis)
        # down the request goes through uncounted, as a publish to a broker that is down does.
        log.warning("API rate not counted (the cache is unavailable): %s", exc)
        return
    if count > rate and not receipt:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise RateLimited(retry_after)


def _count(key: str) -> int:
    try:
        # incr() first: the window's key exists for all but its first request, so the common case
        # costs one cache call (two Redis round trips) and add() is only paid once a window.
        return cache.incr(key)
    except ValueError:
        # The first request of the window. add() is atomic: of two first requests at once, the one
        # that loses it counts itself on the key the other made. The key outlives its window a
        # little so that a late request of the window never opens it again.
        return 1 if cache.add(key, 1, timeout=WINDOW_SECONDS + 5) else cache.incr(key)
