import json
import os
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from quests.services.tokens import token_create

REDIS_DATABASES = 16  # Redis's default `databases`


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist every worker gets a Redis database of its own, as pytest-django gives it a
    PostgreSQL database of its own: worker gwN uses the broker URL's database number plus N, so one
    worker flushing or counting its queues never sees another's messages. Django's settings are
    loaded by now (pytest-django loads them first), so the setting, the environment the test
    subprocesses inherit and the Celery app's configuration are all pointed at it."""
    from tests import emptying, static_files, threads

    emptying.install()
    threads.install()
    static_files.scan_once()

    worker = getattr(config, "workerinput", {}).get("workerid")
    if not worker:
        return
    from django.conf import settings

    broker = urlsplit(settings.CELERY_BROKER_URL)
    if broker.scheme not in ("redis", "rediss"):
        return
    number = int(broker.path.lstrip("/") or 0) + int(worker.removeprefix("gw"))
    if number >= REDIS_DATABASES:
        raise pytest.UsageError(
            f"xdist worker {worker} would use Redis database {number}; lower the database number in "
            f"CELERY_BROKER_URL ({settings.CELERY_BROKER_URL}) or the number of workers (-n)."
        )
    url = broker._replace(path=f"/{number}").geturl()
    settings.CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"] = url

    from config.celery import app

    app.conf.broker_url = url


def _test_databases(*, made: bool) -> list[tuple[str, str]]:
    """(alias, test database name) of each PostgreSQL database the tests use; once `made`, the
    connection's settings name it."""
    from django.db import connections

    return [
        (connection.alias, connection.settings_dict["NAME"] if made else connection.creation._get_test_db_name())
        for connection in connections.all()
        if connection.vendor == "postgresql"
    ]


def _drop_forcibly(alias: str, name: str) -> None:
    """Drop a test database even while other sessions are connected to it: WITH (FORCE) ends them
    (PostgreSQL 13+), where a plain DROP waits for them and then fails."""
    from django.db import connections

    connection = connections[alias]
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings, django_db_blocker, django_db_keepdb, django_db_createdb) -> None:
    """A test database left by an interrupted run (sessions of its leaked processes included) is
    dropped before Django creates it, so that the creation neither asks nor waits on them; unless
    the run keeps its databases (--reuse-db without --create-db)."""
    if django_db_keepdb and not django_db_createdb:
        return
    with django_db_blocker.unblock():
        for alias, name in _test_databases(made=False):
            _drop_forcibly(alias, name)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test databases commit without waiting for the WAL to reach the disk: no test relies on
    surviving a crash of PostgreSQL, and a transactional test commits often. The setting is the
    database's, so the processes the tests start (servers, Celery workers) have it too.
    Before Django drops them at the end, the sessions still connected to them (a server or thread a
    test left behind) are ended, so the drop does not wait on them."""
    from django.db import connections

    from tests import emptying

    with django_db_blocker.unblock():
        for alias, name in _test_databases(made=True):
            connection = connections[alias]
            with connection.cursor() as cursor:
                cursor.execute(f"ALTER DATABASE {connection.ops.quote_name(name)} SET synchronous_commit = off")
                cursor.execute("SET synchronous_commit = off")
            emptying.remember(alias)
    yield
    with django_db_blocker.unblock():
        connections.close_all()
        for alias, name in _test_databases(made=True):
            with connections[alias].creation._nodb_cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [name])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long end-to-end tests first (when `make test-long` runs them with others), so that under
    xdist they start while the many short ones fill the other workers (instead of one of them
    starting last and running alone); the browser tests last, because once Playwright has started
    in a process its event loop stays marked as running in the main thread, which Django's ORM
    refuses outside the browser tests."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("browser"):
            return 2
        return 0 if item.get_closest_marker("long") else 1

    items.sort(key=rank)  # stable: the order within each group is kept


class ApiClient:
    """A thin JSON client for /api/v1 that speaks as an agent (bearer token) or a person (session)."""

    def __init__(self, client: Client, token: str | None = None) -> None:
        self.client = client
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def _call(self, method: str, path: str, body: Any = None, raw: bytes | str | None = None, **extra):
        url = path if path.startswith("/") else f"/api/v1/{path}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        kwargs = {**self.headers, **extra}
        if method == "get":
            return self.client.get(url, **kwargs)
        # Like a real agent's HTTP client: JSON, or an empty body for calls that take none.
        return getattr(self.client, method)(url, data=data or "", content_type="application/json", **kwargs)

    def get(self, path: str, **extra):
        return self._call("get", path, **extra)

    def post(self, path: str, body: Any = None, **extra):
        return self._call("post", path, body, **extra)

    def delete(self, path: str, **extra):
        return self._call("delete", path, **extra)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The default hasher costs about a second per user on this machine; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def alice_client(client, alice):
    """The test client signed in as Alice (the page tests' usual caller)."""
    client.force_login(alice)
    return client


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="bob-password")


@pytest.fixture
def charlie(django_user_model):
    return django_user_model.objects.create_user("charlie", password="charlie-password")


@pytest.fixture
def agent(alice) -> ApiClient:
    """Alice's agent, with a bearer token for all of her missions."""
    _, raw = token_create(user=alice, name="test-agent")
    return ApiClient(Client(), raw)


@pytest.fixture
def person(alice) -> ApiClient:
    """Alice herself, signed in with a session (CSRF is enforced)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


@pytest.fixture
def bob_agent(bob) -> ApiClient:
    _, raw = token_create(user=bob, name="bob-agent")
    return ApiClient(Client(), raw)


@pytest.fixture
def bob_person(bob) -> ApiClient:
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


@pytest.fixture
def mission(agent) -> dict:
    response = agent.post(
        "missions",
        {
            "title": "Book the offsite",
            "objective": "Find and book a venue for 12 people.",
            "constraints": ["Never email the client before Friday"],
            "planned_milestones": [{"kind": "research_complete", "title": "Research"}, {"kind": "plan_approved", "title": "Plan"}],
        },
    )
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def run(agent, mission) -> dict:
    response = agent.post(f"missions/{mission['id']}/runs", {"agent": "test"})
    assert response.status_code == 201, response.content
    return response.json()["run"]


@pytest.fixture
def make_stale():
    """Ages a run's heartbeat past QUESTLOG_HEARTBEAT_TIMEOUT, as if its agent had gone silent."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from quests.models import Run

    def _make_stale(run_id: int) -> None:
        aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
        Run.objects.filter(pk=run_id).update(heartbeat_at=aged)

    return _make_stale


@pytest.fixture
def processes():
    """The real processes a test starts (tests/processes.py): each is stopped, by its pid, when the test ends."""
    from tests.processes import Process

    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def empty_broker(settings):
    """This test's Redis database starts and ends empty, so no worker sees another test's messages."""
    import redis

    assert settings.CELERY_BROKER_URL.startswith("redis://"), "these tests need Redis (make test sets it)"
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.flushdb()
    yield
    broker.flushdb()
