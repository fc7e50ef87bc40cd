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
        pytest.skip("UNLOGGED tables are PostgreSQL's; createcachetable leaves SQLite's table as Django makes it (the suite runs on PostgreSQL)")
    call_command("createcachetable")
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", [django_settings.CACHES["default"]["LOCATION"]])
        assert cursor.fetchone() == ("u",)
    assert count(database_cache, "unlogged", 60) == 1


# --- An agent's request counted by the statement that authenticates it ---------------------------
# With the database's cache on PostgreSQL the count rides in the engine's authentication statement
# (quests.engine: AGENT_TOKEN_COUNTED_PG, CHECKPOINT_READ_COUNTED_PG): no round trip of its own.

WINDOW_START = 60 * 30_000_000


@pytest.fixture
def counted_rate(settings, database_cache, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip(
            "SQLite has no data-modifying CTEs: there the count is an upsert of its own by design, as config.cache tests above check (the suite runs on PostgreSQL)"
        )
    from types import SimpleNamespace

    from quests.services import throttle

    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: WINDOW_START + 45.0))
    settings.QUESTLOG_API_RATE = 3
    return 3


def cache_statements(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "questlog_cache" in q["sql"]]


def test_an_agents_request_is_counted_by_the_statement_that_authenticates_its_token(agent, run, counted_rate, settings):
    path = f"runs/{run['id']}/heartbeat"
    settings.QUESTLOG_API_RATE = 0
    with CaptureQueriesContext(connection) as unlimited:
        assert agent.post(path).status_code == 200
    settings.QUESTLOG_API_RATE = counted_rate
    with CaptureQueriesContext(connection) as counted:
        assert agent.post(path).status_code == 200
    assert len(counted) == len(unlimited)  # no statement of its own
    (statement,) = cache_statements(counted)
    assert "quests_agenttoken" in statement  # the authentication's own
    for _ in range(counted_rate - 1):
        assert agent.post(path).status_code == 200
    refused = agent.post(path)
    assert refused.status_code == 429 and refused["Retry-After"] == "15"


def test_an_agents_checkpoint_is_counted_by_its_first_statement(agent, run, counted_rate):
    path = f"runs/{run['id']}/checkpoints"
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(path, {"agent_state": {"step": 0}, "key": "c-0"}).status_code == 201
    (statement,) = cache_statements(captured)
    assert "quests_agenttoken" in statement and "quests_run" in statement
    for step in range(1, counted_rate):
        assert agent.post(path, {"agent_state": {"step": step}, "key": f"c-{step}"}).status_code == 201
    assert agent.post(path, {"agent_state": {"step": 9}, "key": "c-9"}).status_code == 429


def test_receipts_counted_by_the_authentication_are_never_refused(agent, run, counted_rate):
    op = agent.post(f"runs/{run['id']}/operations", {"key": "a", "kind": "email", "target": "x@example.com", "request": {}}).json()
    assert agent.post(f"operations/{op['id']}/attempt").status_code == 200
    while agent.get("missions").status_code != 429:
        pass
    assert agent.post(f"operations/{op['id']}/complete", {"external_id": "m1", "external_status": "sent"}).status_code == 200


def test_a_token_that_is_not_valid_is_not_counted(counted_rate, client):
    for path in ("missions", "runs/1/checkpoints"):
        response = client.post(f"/api/v1/{path}", {"agent_state": {}}, content_type="application/json", HTTP_AUTHORIZATION="Bearer qlt_made_up")
        assert response.status_code == 401
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM questlog_cache")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db(transaction=True)
def test_counts_taken_by_the_authentication_are_exact_under_concurrent_threads(alice, counted_rate):
    from quests.services import throttle
    from quests.services.tokens import hash_token, token_authenticate, token_create

    _, raw = token_create(user=alice, name="busy")

    def counted() -> int:
        counting = throttle.api_counting(hash_token(raw))
        assert counting is not None
        assert token_authenticate(raw, count=counting) is not None
        assert counting.value is not None
        return counting.value

    seen = counted_by_threads(counted)
    assert sorted(seen) == list(range(1, 8 * 25 + 1))


def test_a_langgraph_save_is_counted_once_by_its_first_statement(agent, counted_rate):
    """QuestlogSaver.put authenticates its token in its own first statement (issue 20: two round
    trips in all): that statement counts it, on the fast path and on the locked one alike (a
    thread's first save takes the locked path), and the request past the rate is refused."""
    from tests.test_graph_put_two_trips import put

    with CaptureQueriesContext(connection) as first:
        parent = put(agent, "counted-thread", 0, None).json()["checkpoint_id"]  # the locked path
    (statement,) = cache_statements(first)
    assert "quests_agenttoken" in statement and "quests_graphthread" in statement
    with CaptureQueriesContext(connection) as fast:
        parent = put(agent, "counted-thread", 1, parent).json()["checkpoint_id"]
    assert len(cache_statements(fast)) == 1 and len(fast) == 2  # the read (with the count) and the write
    assert put(agent, "counted-thread", 2, parent).status_code == 201
    refused = put(agent, "counted-thread", 3, parent)
    assert refused.status_code == 429, refused.content


def test_a_langgraph_save_with_a_token_that_is_not_valid_is_refused_and_not_counted(counted_rate, client, alice):
    from quests.models import AgentToken
    from quests.services.tokens import token_create, token_revoke
    from tests.conftest import ApiClient
    from tests.test_graph_put_two_trips import put

    _, raw = token_create(user=alice, name="soon revoked")
    revoked = ApiClient(client, raw)
    assert put(revoked, "revoked-thread", 0, None).status_code == 201
    token_revoke(user=alice, token_id=AgentToken.objects.get(name="soon revoked").pk)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM questlog_cache")
    for bearer in (ApiClient(client, "qlt_made_up"), revoked):
        answer = put(bearer, "revoked-thread", 1, None)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthenticated", answer.content
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM questlog_cache")
        assert cursor.fetchone() == (0,)


def test_a_langgraph_task_write_is_one_statement_that_authenticates_and_counts(agent, counted_rate, client):
    """put_writes on a live thread is one round trip in all (issue 20): its statement authenticates
    the token and counts the request; past the rate it is refused, and a made-up token is refused
    and not counted."""
    from tests.conftest import ApiClient
    from tests.test_graph_put_two_trips import put

    graph_id = put(agent, "writes-thread", 0, None).json()["checkpoint_id"]
    body = {
        "thread_id": "writes-thread",
        "checkpoint_id": graph_id,
        "task_id": "t1",
        "writes": [{"idx": 0, "channel": "k01", "value": {"type": "json", "data": 1}}],
    }
    with CaptureQueriesContext(connection) as captured:
        assert agent.post("langgraph/writes", body).status_code == 200
    # (The test's own transaction makes the service's transaction a savepoint.)
    statements = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT") and "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 1 and "quests_agenttoken" in statements[0] and "questlog_cache" in statements[0]
    for _ in range(counted_rate - 2):
        assert agent.post("langgraph/writes", body).status_code == 200
    assert agent.post("langgraph/writes", body).status_code == 429
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM questlog_cache")
    refused = ApiClient(client, "qlt_made_up").post("langgraph/writes", body)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM questlog_cache")
        assert cursor.fetchone() == (0,)


def test_a_langgraph_get_tuple_is_one_statement_that_authenticates_and_counts(agent, counted_rate, client):
    """get_tuple (the listing of one checkpoint) is one round trip in all (issue 20); other listings
    authenticate the token in full. Both are counted once; a made-up token is refused, not counted."""
    from tests.conftest import ApiClient

    latest = "langgraph/checkpoints?thread_id=read-thread&checkpoint_ns=&limit=1"
    assert agent.get(latest).status_code == 200  # the token's first use is recorded (then once a minute)
    with CaptureQueriesContext(connection) as captured:
        answer = agent.get(latest)
    assert answer.status_code == 200 and answer.json()["items"] == []
    (statement,) = [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert "quests_agenttoken" in statement and "questlog_cache" in statement
    with CaptureQueriesContext(connection) as listing:
        assert agent.get("langgraph/checkpoints?thread_id=read-thread&limit=5").status_code == 200
    assert len(cache_statements(listing)) == 1
    assert agent.get(latest).status_code == 429
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM questlog_cache")
    refused = ApiClient(client, "qlt_made_up").get(latest)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM questlog_cache")
        assert cursor.fetchone() == (0,)
