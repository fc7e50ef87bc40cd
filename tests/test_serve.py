"""Database connections and the production web server: the settings give PostgreSQL persistent
connections with health checks, or a psycopg pool when asked (never in a Celery process, which
forks), and `make serve` (scripts/serve: migrate, then gunicorn with config/gunicorn.py) answers
pages and the API on PostgreSQL and on the embedded defaults, reusing its connections across
requests. Every server a test starts is stopped by that test, by its pid."""

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from config.celery import app as celery_app
from config.database import database_settings, is_celery_process
from quests.services.tokens import token_create
from tests.processes import Process, database_url, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
# scripts/serve runs with DEBUG off, which refuses to start without a secret key of its own.
SERVER_SECRET_KEY = f"test-serve-{uuid.uuid4().hex}{uuid.uuid4().hex}"
PG = "postgres://u:p@127.0.0.1:5432/questlog"
SQLITE = "sqlite:////tmp/questlog-test.sqlite3"


# --- settings -------------------------------------------------------------------------------------


def test_postgresql_keeps_persistent_connections_with_health_checks_by_default():
    config = database_settings({"DATABASE_URL": PG}, SQLITE, may_pool=True)
    assert config["CONN_MAX_AGE"] == 300 and config["CONN_HEALTH_CHECKS"] is True
    assert "pool" not in config.get("OPTIONS", {})


def test_the_connection_lifetime_comes_from_the_environment():
    config = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_CONN_MAX_AGE": "42"}, SQLITE, may_pool=True)
    assert config["CONN_MAX_AGE"] == 42


def test_a_pool_size_gives_a_psycopg_pool_sized_by_the_settings_and_no_persistent_connections():
    environ = {"DATABASE_URL": PG, "QUESTLOG_DB_POOL_SIZE": "6", "QUESTLOG_DB_POOL_MIN_SIZE": "3", "QUESTLOG_DB_POOL_TIMEOUT": "7"}
    config = database_settings(environ, SQLITE, may_pool=True)
    pool = config["OPTIONS"]["pool"]
    assert (pool["min_size"], pool["max_size"], pool["timeout"]) == (3, 6, 7)
    assert callable(pool["check"])  # a connection is checked before the pool hands it out
    assert config["CONN_MAX_AGE"] == 0  # Django refuses a pool with persistent connections


def test_the_pool_never_holds_more_than_its_size_at_rest():
    pool = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_POOL_SIZE": "1"}, SQLITE, may_pool=True)["OPTIONS"]["pool"]
    assert pool["min_size"] == pool["max_size"] == 1


def test_a_process_that_may_not_pool_keeps_persistent_connections_instead():
    config = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_POOL_SIZE": "6"}, SQLITE, may_pool=False)
    assert "pool" not in config.get("OPTIONS", {})
    assert config["CONN_MAX_AGE"] == 300 and config["CONN_HEALTH_CHECKS"] is True


@pytest.mark.parametrize(
    ("argv", "celery"),
    [
        (["/srv/questlog/.venv/bin/celery", "-A", "config", "worker"], True),
        (["/usr/lib/python3/site-packages/celery/__main__.py", "-A", "config", "beat"], True),  # python -m celery
        (["manage.py", "purge_expired"], False),
        (["/srv/questlog/.venv/bin/gunicorn", "--config", "config/gunicorn.py"], False),
        ([], False),
    ],
)
def test_celery_processes_are_recognised(argv, celery):
    assert is_celery_process(argv) is celery


def test_sqlite_stays_as_it_was():
    config = database_settings({"QUESTLOG_DB_POOL_SIZE": "6"}, SQLITE, may_pool=True)
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["CONN_MAX_AGE"] == 0 and "pool" not in config["OPTIONS"]
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def loaded_settings(*code_args: str, **env: str) -> dict:
    """DATABASES["default"] as a fresh Python process loads it with this environment."""
    code = (
        "import json, sys; from django.conf import settings; d = settings.DATABASES['default']; "
        "print(json.dumps({'max_age': d['CONN_MAX_AGE'], 'health': d.get('CONN_HEALTH_CHECKS'), "
        "'pool': sorted(d.get('OPTIONS', {}).get('pool') or [])}))"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env}
    out = subprocess.run([sys.executable, "-c", code, *code_args], cwd=ROOT, env=environment, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_settings_module_reads_the_environment():
    assert loaded_settings(DATABASE_URL=PG, QUESTLOG_DB_CONN_MAX_AGE="120") == {"max_age": 120, "health": True, "pool": []}
    pooled = loaded_settings(DATABASE_URL=PG, QUESTLOG_DB_POOL_SIZE="4")
    assert pooled["max_age"] == 0 and "max_size" in pooled["pool"]


def test_celery_workers_reuse_connections_instead_of_closing_them_around_every_task():
    # Without this, Celery's Django fixup closes every connection before and after each task.
    assert celery_app.conf.get("CELERY_DB_REUSE_MAX") >= 100


@pytest.mark.django_db
def test_a_task_applied_eagerly_leaves_its_callers_connection_and_transaction_alone():
    from quests.tasks import snapshots_sweep_task

    with connection.cursor():
        pass
    before = connection.connection
    snapshots_sweep_task.apply().get()  # inside the test's transaction, as inside a request's
    assert connection.connection is before and connection.in_atomic_block


# --- the web server -------------------------------------------------------------------------------


class Server:
    """scripts/serve (what `make serve` runs) or gunicorn alone, on a free port, logging to a file."""

    def __init__(self, tmp_path: Path, cmd: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "server.log"
        environment = {
            # Nothing of the test's own database or broker unless given: the defaults are under test too.
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_DEBUG")},
            "PYTHON": sys.executable,
            "QUESTLOG_DATA_DIR": str(tmp_path / "data"),
            "QUESTLOG_BIND": f"127.0.0.1:{self.port}",
            "QUESTLOG_WEB_WORKERS": "1",
            "QUESTLOG_WEB_THREADS": "2",
            "DJANGO_SECRET_KEY": SERVER_SECRET_KEY,
            **env,
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT)

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                return httpx.get(self.url + "/accounts/login/", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 90, "the web server")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # gunicorn's graceful stop, workers included
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def serve(tmp_path: Path, servers: list[Server], **env: str) -> Server:
    server = Server(tmp_path, [str(ROOT / "scripts" / "serve")], env)
    servers.append(server)
    return server


def gunicorn(tmp_path: Path, servers: list[Server], **env: str) -> Server:
    server = Server(tmp_path, [sys.executable, "-m", "gunicorn", "--config", "config/gunicorn.py"], env)
    servers.append(server)
    return server


def server_backends() -> set[int]:
    """Backend pids of the other sessions on the test database: the server's connections."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return {pid for (pid,) in cursor.fetchall()}


def answers_page_and_api(server: Server, token: str) -> None:
    login = httpx.get(server.url + "/accounts/login/", timeout=10)
    assert login.status_code == 200 and "<form" in login.text
    css = httpx.get(server.url + "/static/css/questlog.css", timeout=10)  # whitenoise, with DEBUG off
    assert css.status_code == 200
    missions = httpx.get(server.url + "/api/v1/missions", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert missions.status_code == 200, missions.text
    assert "items" in missions.json()


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_make_serve_answers_pages_and_the_api_on_postgresql_and_keeps_its_connection(alice, tmp_path, servers):
    _, token = token_create(user=alice, name="serve")
    # One worker with one thread: every request below is served on the same thread.
    server = serve(tmp_path, servers, DATABASE_URL=database_url(), CELERY_BROKER_URL=django_settings.CELERY_BROKER_URL, QUESTLOG_WEB_THREADS="1")
    answers_page_and_api(server, token)
    assert "Booting worker" in server.log.read_text()  # gunicorn, not Django's development server

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as client:
        assert client.get("/api/v1/missions").status_code == 200
        first = server_backends()
        for _ in range(5):
            assert client.get("/api/v1/missions").status_code == 200
        assert first and server_backends() == first  # the same backends: no connection per request


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_with_a_pool_the_server_serves_every_request_from_the_pool(alice, tmp_path, servers):
    _, token = token_create(user=alice, name="pool")
    # Sessions on this database before the server starts are not its own (in the whole suite,
    # other tests' servers and threads may still be closing theirs).
    others = server_backends()
    server = gunicorn(tmp_path, servers, DATABASE_URL=database_url(), QUESTLOG_DB_POOL_SIZE="2", QUESTLOG_DB_POOL_MIN_SIZE="2")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as client:
        assert client.get("/api/v1/missions").status_code == 200
        wait_for(lambda: len(server_backends() - others) == 2, 10, "the pool's two connections")
        pool = server_backends() - others
        for _ in range(5):
            assert client.get("/api/v1/missions").status_code == 200
        assert server_backends() - others == pool


@pytest.mark.long
def test_make_serve_runs_on_the_embedded_defaults(tmp_path, servers):
    # A fresh clone: no DATABASE_URL, no broker, an empty data dir that migrate fills.
    server = serve(tmp_path, servers)
    assert (tmp_path / "data" / "questlog.sqlite3").exists()
    login = httpx.get(server.url + "/accounts/login/", timeout=10)
    assert login.status_code == 200
    assert httpx.get(server.url + "/api/v1/missions", timeout=10).json()["error"]["code"] == "unauthenticated"
    assert httpx.get(server.url + "/static/css/questlog.css", timeout=10).status_code == 200
    # DEBUG is off by default: an unknown page is the plain 404, not Django's debug page.
    missing = httpx.get(server.url + "/no-such-page/", timeout=10)
    assert missing.status_code == 404 and "URLconf" not in missing.text


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_keeps_one_connection_across_tasks_and_never_pools(tmp_path):
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    broker.flushdb()  # no other test's messages: every task below is ours
    cmd = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "maintenance",
        "--pool", "prefork", "--concurrency", "1", "-n", f"serve-{uuid.uuid4().hex[:8]}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
    ]  # fmt: skip
    # A pool size in its environment must not give the forked child a pool (it would open two).
    # Connections on this database before the worker starts are not its own (in the whole suite,
    # other tests' servers may still be closing theirs).
    others = server_backends()
    worker = Process("worker", cmd, tmp_path, QUESTLOG_DB_POOL_SIZE="2", QUESTLOG_DB_POOL_MIN_SIZE="2")
    try:
        worker.wait_for_output(" ready.")

        def sweep(count: int) -> None:
            celery_app.send_task("quests.tasks.snapshots_sweep_task")
            wait_for(lambda: worker.output().count("succeeded") >= count, 30, f"task {count}")

        sweep(1)
        first = server_backends() - others
        for count in range(2, 5):
            sweep(count)
        assert len(first) == 1 and server_backends() - others == first
    finally:
        worker.stop()
        broker.flushdb()
