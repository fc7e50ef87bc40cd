"""Throttling: failed logins locked out per account and per address by django-axes (a form error
that says when to try again, and a lockout that ends by itself); API requests limited per agent
token (429, a JSON error body, Retry-After), counted in the cache, receipts never refused."""

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
from axes.models import AccessAttempt
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from config.cache import PER_PROCESS_BACKEND, cache_settings, per_process_cache_refusal
from quests.services import throttle
from quests.services.tokens import token_create
from tests.conftest import ApiClient
from tests.processes import database_url, free_port
from tests.test_serve import ROOT, SERVER_SECRET_KEY, serve, servers  # noqa: F401

pytestmark = pytest.mark.django_db

LIMIT = 3


@pytest.fixture(autouse=True)
def _login_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def log_in(username: str, password: str, address: str):
    return Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})


def assert_locked_out(response) -> None:
    body = response.content.decode()
    assert response.status_code == 429
    # The login page with a form error, not an error page.
    assert 'role="alert"' in body and 'id="id_username"' in body
    assert "Too many failed logins" in body and "try again in 15 minutes (after" in body


def test_failed_logins_lock_out_the_account_from_any_address(alice, bob):
    for attempt in range(LIMIT - 1):
        response = log_in("alice", "wrong", f"10.0.0.{attempt}")
        assert response.status_code == 200 and "Too many" not in response.content.decode()
    assert_locked_out(log_in("alice", "wrong", "10.0.0.9"))
    # Locked out even with the right password, from yet another address.
    assert_locked_out(log_in("alice", "alice-password", "10.0.1.1"))
    # Another account is not.
    assert log_in("bob", "bob-password", "10.0.1.2").status_code == 302


def test_failed_logins_from_one_address_lock_out_the_address(alice, bob):
    for name in ("nobody", "alice", "carol")[: LIMIT - 1]:
        assert log_in(name, "wrong", "10.0.0.7").status_code == 200
    assert_locked_out(log_in("dave", "wrong", "10.0.0.7"))
    assert_locked_out(log_in("bob", "bob-password", "10.0.0.7"))
    assert log_in("bob", "bob-password", "10.0.0.8").status_code == 302


def test_the_lockout_ends_by_itself(alice, settings):
    for _ in range(LIMIT):
        log_in("alice", "wrong", "10.0.0.1")
    assert_locked_out(log_in("alice", "alice-password", "10.0.0.1"))
    # As if the cool-off had passed since the last failure.
    for row in AccessAttempt.objects.all():
        AccessAttempt.objects.filter(pk=row.pk).update(attempt_time=row.attempt_time - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert log_in("alice", "alice-password", "10.0.0.1").status_code == 302


def test_behind_a_proxy_the_address_is_the_one_the_proxy_saw(alice, bob, settings):
    settings.QUESTLOG_PROXY_COUNT = 1
    proxy = "192.0.2.1"
    for attempt in range(LIMIT):
        # The client's own claim (the left entry) changes every time; the proxy's entry does not.
        Client(REMOTE_ADDR=proxy).post("/accounts/login/", {"username": f"guess{attempt}", "password": "x"}, HTTP_X_FORWARDED_FOR=f"1.1.1.{attempt}, 10.9.9.9")
    response = Client(REMOTE_ADDR=proxy).post("/accounts/login/", {"username": "bob", "password": "bob-password"}, HTTP_X_FORWARDED_FOR="10.9.9.9")
    assert_locked_out(response)
    # Another person behind the same proxy is not locked out.
    response = Client(REMOTE_ADDR=proxy).post("/accounts/login/", {"username": "bob", "password": "bob-password"}, HTTP_X_FORWARDED_FOR="10.8.8.8")
    assert response.status_code == 302


# --- the API's rate per token ---

RATE = 3
# A fixed moment 45 s into a one-minute window: the window cannot roll over in the middle of a test.
NOW = 60 * 30_000_000 + 45.0


@pytest.fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: NOW))


@pytest.fixture
def rate(settings, fixed_clock):
    settings.QUESTLOG_API_RATE = RATE
    return RATE


def test_past_the_rate_a_token_gets_429_with_retry_after(agent, alice, rate):
    for _ in range(rate):
        assert agent.get("missions").status_code == 200
    response = agent.get("missions")
    assert response.status_code == 429
    assert response["Retry-After"] == "15"
    error = response.json()["error"]
    assert error["code"] == "rate_limited" and error["retry_after"] == 15 and "try again in 15 s" in error["message"]
    # Another token of the same person has its own count.
    _, raw = token_create(user=alice, name="second")
    assert ApiClient(Client(), raw).get("missions").status_code == 200


def test_the_next_window_lets_the_token_in_again(agent, settings, monkeypatch):
    settings.QUESTLOG_API_RATE = 1
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: NOW))
    assert agent.get("missions").status_code == 200
    assert agent.get("missions").status_code == 429
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: NOW + 15))
    assert agent.get("missions").status_code == 200


def test_receipts_are_counted_but_never_refused(agent, run, settings, fixed_clock):
    ops = []
    for key in ("a", "b"):
        op = agent.post(f"runs/{run['id']}/operations", {"key": key, "kind": "email", "target": "x@example.com", "request": {}}).json()
        assert agent.post(f"operations/{op['id']}/attempt").status_code == 200
        ops.append(op)
    settings.QUESTLOG_API_RATE = 1
    agent.get("missions")
    assert agent.get("missions").status_code == 429
    assert agent.post(f"operations/{ops[0]['id']}/complete", {"external_id": "m1", "external_status": "sent"}).status_code == 200
    assert agent.post(f"operations/{ops[0]['id']}/observe", {"external_status": "delivered"}).status_code == 200
    assert agent.post(f"operations/{ops[1]['id']}/fail", {"error": "SMTP timeout", "retryable": False}).status_code == 200
    # Receipts are counted: the token stays over its rate.
    assert agent.post(f"operations/{ops[1]['id']}/attempt").status_code == 429


def test_a_rate_of_zero_turns_the_limit_off(agent, settings, fixed_clock):
    settings.QUESTLOG_API_RATE = 0
    assert all(agent.get("missions").status_code == 200 for _ in range(20))


def test_a_persons_session_is_not_limited(person, rate):
    assert all(person.get("missions").status_code == 200 for _ in range(rate * 3))


def test_counting_costs_no_query(agent, mission, settings, fixed_clock):
    """The count is in the cache: a request under the limit makes the queries it made unlimited."""
    path = f"missions/{mission['id']}"
    agent.get(path)  # warm: the token's last use is recorded at most once a minute
    settings.QUESTLOG_API_RATE = 0
    with CaptureQueriesContext(connection) as unlimited:
        assert agent.get(path).status_code == 200
    settings.QUESTLOG_API_RATE = 1000
    with CaptureQueriesContext(connection) as counted:
        assert agent.get(path).status_code == 200
    assert len(counted) == len(unlimited)


def test_with_the_cache_unreachable_requests_go_through_uncounted(agent, mission, settings):
    # Redis down: the limit is not worth refusing work for (as a publish to a broker that is down).
    settings.QUESTLOG_API_RATE = 1
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    for _ in range(3):
        assert agent.get(f"missions/{mission['id']}").status_code == 200


# --- the counts are shared by every web process (issue 24, finding 8) --------------------------------


@pytest.mark.parametrize(
    ("environ", "backend"),
    [
        ({}, PER_PROCESS_BACKEND),  # `make run`: one development server
        ({"CELERY_BROKER_URL": "filesystem://"}, PER_PROCESS_BACKEND),
        ({"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}, "django.core.cache.backends.redis.RedisCache"),
        ({"QUESTLOG_CACHE_URL": "redis://cache.internal:6379/1"}, "django.core.cache.backends.redis.RedisCache"),
        ({"QUESTLOG_CACHE_URL": "db://", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}, "config.cache.CountingDatabaseCache"),
        ({"QUESTLOG_CACHE_URL": "locmem://"}, PER_PROCESS_BACKEND),
    ],
)
def test_the_cache_comes_from_the_environment(environ, backend):
    assert cache_settings(environ)["default"]["BACKEND"] == backend


def test_an_unknown_cache_url_is_refused_with_what_is_understood():
    with pytest.raises(ImproperlyConfigured, match="db://"):
        cache_settings({"QUESTLOG_CACHE_URL": "memcached://127.0.0.1"})


@pytest.mark.parametrize(
    ("environ", "workers", "refused"),
    [
        ({"QUESTLOG_CACHE_URL": "locmem://"}, 3, True),
        ({}, 3, True),  # gunicorn started by hand on the embedded defaults
        ({"QUESTLOG_CACHE_URL": "locmem://"}, 1, False),  # one process: its memory is shared by its threads
        ({"QUESTLOG_CACHE_URL": "locmem://", "QUESTLOG_API_RATE": "0"}, 3, False),  # no throttle to count
        ({"QUESTLOG_CACHE_URL": "locmem://", "QUESTLOG_API_RATE": "0", "QUESTLOG_PASSWORD_RESET": "1"}, 3, True),
        ({"QUESTLOG_CACHE_URL": "db://"}, 3, False),
        ({"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}, 3, False),
    ],
)
def test_several_workers_with_a_per_process_cache_are_refused_while_a_throttle_is_on(environ, workers, refused):
    assert (per_process_cache_refusal(environ, workers) is not None) is refused


def test_gunicorn_refuses_several_workers_with_a_per_process_cache_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "DATABASE_URL")}
    env.update(
        {
            "QUESTLOG_DATA_DIR": str(tmp_path),
            "QUESTLOG_BIND": f"127.0.0.1:{free_port()}",
            "QUESTLOG_WEB_WORKERS": "3",
            "QUESTLOG_API_RATE": "30",
            "QUESTLOG_CACHE_URL": "locmem://",
            "DJANGO_SECRET_KEY": SERVER_SECRET_KEY,
            "DJANGO_DEBUG": "0",
        }
    )
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--config", "config/gunicorn.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Refusing to start: 3 web workers"), result.stderr
    assert "Booting worker" not in result.stdout + result.stderr


@pytest.fixture
def database_cache(settings):
    settings.CACHES = cache_settings({"QUESTLOG_CACHE_URL": "db://"})
    call_command("createcachetable")
    cache.clear()
    yield cache
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_the_database_cache_counts_every_increment_from_concurrent_threads(database_cache):
    """Django's own database cache reads and writes back, so two requests at once both write the
    same count; the counting cache locks the row in between. Real threads, real PostgreSQL."""
    threads, each = 8, 25
    database_cache.add("count", 0, timeout=300)
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def count() -> None:
        try:
            start.wait()
            for _ in range(each):
                database_cache.incr("count")
        except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=count) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not errors, errors
    assert database_cache.get("count") == threads * each


def test_the_database_cache_knows_no_missing_or_expired_key(database_cache):
    with pytest.raises(ValueError):
        database_cache.incr("never-set")
    database_cache.add("gone", 5, timeout=-1)  # already expired
    with pytest.raises(ValueError):
        database_cache.incr("gone")
    assert database_cache.add("gone", 1, timeout=60) and database_cache.incr("gone") == 2


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_make_serve_with_three_workers_and_no_redis_lets_the_rate_through_once(alice, tmp_path, servers):  # noqa: F811
    """Issue 24, finding 8: with 3 workers, QUESTLOG_API_RATE=30 and no shared cache, 90 requests
    passed. `make serve` without Redis now counts in the database: 30 pass, whichever worker
    answers, however many connections at once."""
    _, raw = token_create(user=alice, name="rate")
    server = serve(
        tmp_path,
        servers,
        DATABASE_URL=database_url(),
        QUESTLOG_WEB_WORKERS="3",
        QUESTLOG_WEB_THREADS="4",
        QUESTLOG_API_RATE="30",
    )
    # All in one minute window: start at its beginning half (the 90 requests take a few seconds).
    if time.time() % 60 > 30:
        time.sleep(60 - time.time() % 60 + 0.5)

    def ask(_) -> int:
        # A connection per request, so that all three workers answer some.
        return httpx.get(server.url + "/api/v1/missions", headers={"Authorization": f"Bearer {raw}"}, timeout=30).status_code

    with ThreadPoolExecutor(max_workers=9) as pool:
        statuses = list(pool.map(ask, range(90)))
    assert sorted(set(statuses)) == [200, 429], statuses
    assert statuses.count(200) == 30, statuses.count(200)
