"""The API's rate limit per agent token: a fixed one-minute window counted in Django's cache.

The count lives in the cache (Redis in production, local memory in the embedded setup), never in
the database, so a throttled request costs no query and the fast path's query budgets hold."""

import math
import time

from django.conf import settings
from django.core.cache import cache

from quests.services.errors import RateLimited

WINDOW_SECONDS = 60


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
    # add() then incr(): both atomic in Redis, so concurrent workers never lose a count. The key
    # outlives its window a little so a late incr() never finds it gone.
    cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add() and incr(): this request opens the count again
        cache.add(key, 1, timeout=WINDOW_SECONDS + 5)
        count = 1
    if count > rate and not receipt:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise RateLimited(retry_after)
