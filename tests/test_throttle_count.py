"""config.cache.count, what every throttled request pays: one round trip on Redis (INCR and EXPIRE
NX pipelined) and one statement on the database's cache, exact under real concurrent threads,
and a window's key that expires however often it is counted. Real Redis, real PostgreSQL."""

import threading
from collections.abc import Callable
from unittest import mock

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import cache, caches
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config.cache import cache_settings, count

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_cache(settings):
    settings.CACHES = cache_settings({"QUESTLOG_CACHE_URL": django_settings.CELERY_BROKER_URL})
    cache.clear()
    yield caches["default"]  # the backend itself, as the throttle passes it
    cache.clear()


@pytest.fixture
def database_cache(settings):
    settings.CACHES = cache_settings({"QUESTLOG_CACHE_URL": "db://"})
    call_command("createcachetable")
    cache.clear()
    yield caches["default"]  # the backend itself, as the throttle passes it
    cache.clear()


def counted_by_threads(counter: Callable[[], int], threads: int = 8, each: int = 25) -> list[int]:
    """Every count the threads saw, started at once by a barrier."""
    start = threading.Barrier(threads)
    seen: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            start.wait()
            for _ in range(each):
                seen.append(counter())
        except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not errors, errors
    return seen


def test_redis_counts_in_one_round_trip_and_the_key_expires(redis_cache):
    client = redis_cache._cache.get_client(None, write=True)
    with mock.patch.object(redis.client.Pipeline, "execute", autospec=True, side_effect=redis.client.Pipeline.execute) as executed:
        assert [count(redis_cache, "window", 65) for _ in range(3)] == [1, 2, 3]
    assert executed.call_count == 3  # one pipeline, so one round trip, per count
    key = redis_cache.make_and_validate_key("window")
    assert 60 < client.ttl(key) <= 65
    # Counting again never pushes the end of the window out.
    client.expire(key, 10)
    count(redis_cache, "window", 65)
    assert client.ttl(key) <= 10
    # The count is the value Django's cache reads.
    assert redis_cache.get("window") == 4


@pytest.mark.django_db(transaction=True)
def test_redis_counts_every_request_from_concurrent_threads(redis_cache):
    seen = counted_by_threads(lambda: count(redis_cache, "busy", 60))
    assert sorted(seen) == list(range(1, 8 * 25 + 1))  # each count seen once: none lost, none repeated


def test_the_database_cache_counts_in_one_statement(database_cache):
    with CaptureQueriesContext(connection) as first:
        assert count(database_cache, "window", 65) == 1
    with CaptureQueriesContext(connection) as later:
        assert count(database_cache, "window", 65) == 2
    # Inside the test's transaction a savepoint guards the statement; outside one it stands alone.
    assert [q["sql"] for q in first if "questlog_cache" in q["sql"]] == [q["sql"] for q in later if "questlog_cache" in q["sql"]]
    assert len([q for q in later if "questlog_cache" in q["sql"]]) == 1


@pytest.mark.django_db(transaction=True)
def test_the_database_cache_counts_every_request_from_concurrent_threads(database_cache):
    with CaptureQueriesContext(connection) as alone:
        count(database_cache, "warm", 60)
    assert len(alone) == 1  # outside a transaction: the one statement, committing by itself
    seen = counted_by_threads(lambda: count(database_cache, "busy", 60))
    assert sorted(seen) == list(range(1, 8 * 25 + 1))


def test_an_expired_database_count_starts_again(database_cache):
    assert count(database_cache, "gone", -1) == 1  # already expired when made
    assert count(database_cache, "gone", 60) == 1
    assert count(database_cache, "gone", 60) == 2


def test_a_key_set_otherwise_fails_the_count_and_leaves_the_transaction_usable(database_cache):
    database_cache.set("pickled", "not a number", 60)
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the database says of the cast
        count(database_cache, "pickled", 60)
    assert database_cache.get("pickled") == "not a number"


def test_any_other_cache_counts_with_incr_and_add(settings):
    settings.CACHES = cache_settings({"QUESTLOG_CACHE_URL": "locmem://"})
    cache.clear()
    assert [count(caches["default"], "window", 60) for _ in range(3)] == [1, 2, 3]
    cache.clear()


def test_the_database_cache_table_is_unlogged_on_postgresql(database_cache):
    """Counts skip the write-ahead log (quests/management/commands/createcachetable.py); made again,
    the table stays so."""
    if connection.vendor != "postgresql":
        pytest.skip("UNLOGGED is PostgreSQL's")
    call_command("createcachetable")
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", [django_settings.CACHES["default"]["LOCATION"]])
        assert cursor.fetchone() == ("u",)
    assert count(database_cache, "unlogged", 60) == 1
