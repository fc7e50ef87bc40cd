"""Every request has a deadline (issue 24, finding 2): PostgreSQL cancels a statement after
QUESTLOG_DB_STATEMENT_TIMEOUT, a SQLite writer waits QUESTLOG_DB_BUSY_TIMEOUT for the write lock,
and no request starts a statement after QUESTLOG_REQUEST_TIMEOUT. A request that hits one answers
503 `unavailable` and nothing of it is written. The locks are held by other real connections."""

import sqlite3
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection, connections
from django.db.utils import ConnectionHandler, OperationalError

from config.database import database_settings, is_schema_migration
from quests.api import timed_out
from quests.models import AuditEvent, Constraint

PG = "postgres://u:p@127.0.0.1:5432/questlog"


# --- settings -------------------------------------------------------------------------------------


def test_postgresql_connections_get_the_statement_timeout_from_the_settings():
    assert database_settings({"DATABASE_URL": PG}, PG, may_pool=True)["OPTIONS"]["options"] == "-c statement_timeout=10000"
    config = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_STATEMENT_TIMEOUT": "3"}, PG, may_pool=True)
    assert config["OPTIONS"]["options"] == "-c statement_timeout=3000"
    pooled = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_POOL_SIZE": "4"}, PG, may_pool=True)
    assert pooled["OPTIONS"]["options"] == "-c statement_timeout=10000" and "pool" in pooled["OPTIONS"]


def test_the_statement_timeout_can_be_turned_off_and_spares_processes_without_a_client():
    assert "options" not in database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_STATEMENT_TIMEOUT": "0"}, PG, may_pool=True).get("OPTIONS", {})
    # Celery's batches and `migrate` have no client waiting on them.
    assert "options" not in database_settings({"DATABASE_URL": PG}, PG, may_pool=False, deadline=False).get("OPTIONS", {})
    assert is_schema_migration(["manage.py", "migrate", "--noinput"])
    assert not is_schema_migration(["manage.py", "purge_expired"]) and not is_schema_migration(["gunicorn"])


def test_the_sqlite_busy_timeout_comes_from_the_settings(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    assert database_settings({}, url, may_pool=True)["OPTIONS"]["timeout"] == 10
    assert database_settings({"QUESTLOG_DB_BUSY_TIMEOUT": "2"}, url, may_pool=True)["OPTIONS"]["timeout"] == 2


def test_a_sqlite_writer_gives_up_after_the_busy_timeout_and_that_is_a_deadline(tmp_path, django_db_blocker):
    """Through Django's own SQLite backend configured by the settings (a file of its own, not the
    test database), while another connection holds the write lock."""
    config = database_settings({"QUESTLOG_DB_BUSY_TIMEOUT": "1"}, f"sqlite:///{tmp_path / 'q.sqlite3'}", may_pool=True)
    writer = ConnectionHandler({"default": config})
    with django_db_blocker.unblock():
        with writer["default"].cursor() as cursor:
            cursor.execute("CREATE TABLE t (x integer)")
        holder = sqlite3.connect(tmp_path / "q.sqlite3", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held
        try:
            started = time.monotonic()
            with pytest.raises(OperationalError) as refused:
                with writer["default"].cursor() as cursor:
                    cursor.execute("INSERT INTO t VALUES (1)")
            assert 0.9 < time.monotonic() - started < 5
            assert timed_out(refused.value)
        finally:
            holder.rollback()
            holder.close()
            writer.close_all()


# --- PostgreSQL, for real ---------------------------------------------------------------------------


@contextmanager
def statement_timeout(seconds: int):
    """This connection opened again as the settings configure it with QUESTLOG_DB_STATEMENT_TIMEOUT."""
    options = connection.settings_dict.setdefault("OPTIONS", {})
    before = options.get("options")
    configured = database_settings({"DATABASE_URL": PG, "QUESTLOG_DB_STATEMENT_TIMEOUT": str(seconds)}, PG, may_pool=False)
    options.pop("options", None)
    options.update({"options": configured["OPTIONS"]["options"]} if "options" in configured.get("OPTIONS", {}) else {})
    connection.close()
    try:
        yield
    finally:
        if before is None:
            options.pop("options", None)
        else:
            options["options"] = before
        connection.close()


@contextmanager
def mission_locked_elsewhere(mission_id: int, *, release_after: float | None = None):
    """Another real connection locks the mission's row, as a long request would."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    other = psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")})
    other.execute("SELECT id FROM quests_mission WHERE id = %s FOR UPDATE", (mission_id,))
    timer = threading.Timer(release_after, other.rollback) if release_after is not None else None
    if timer:
        timer.start()
    try:
        yield
    finally:
        if timer:
            timer.join()
        other.rollback()
        other.close()


def assert_deadline_answer(response) -> None:
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "unavailable" and error["retry_after"] == 5 and "deadline" in error["message"]
    assert response["Retry-After"] == "5"


@pytest.mark.django_db(transaction=True)
def test_a_statement_past_the_statement_timeout_answers_503_with_nothing_written(agent, mission):
    constraints, events = Constraint.objects.count(), AuditEvent.objects.count()
    with statement_timeout(1), mission_locked_elsewhere(mission["id"]):
        response = agent.post(f"missions/{mission['id']}/constraints", {"text": "Only on weekdays"})
    assert_deadline_answer(response)
    assert (Constraint.objects.count(), AuditEvent.objects.count()) == (constraints, events)
    # The lock gone, the same request goes through on the same connection settings.
    with statement_timeout(1):
        assert agent.post(f"missions/{mission['id']}/constraints", {"text": "Only on weekdays"}).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_request_past_its_deadline_starts_no_more_statements_and_writes_nothing(agent, mission, settings):
    """The lock is released after 1.5 s, so the request's own statement finishes, but the request
    has run past QUESTLOG_REQUEST_TIMEOUT (1 s): its next statement is refused and its transaction
    rolled back."""
    settings.QUESTLOG_REQUEST_TIMEOUT = 1
    constraints, events = Constraint.objects.count(), AuditEvent.objects.count()
    with statement_timeout(0), mission_locked_elsewhere(mission["id"], release_after=1.5):
        response = agent.post(f"missions/{mission['id']}/constraints", {"text": "Only on weekdays"})
    assert_deadline_answer(response)
    assert (Constraint.objects.count(), AuditEvent.objects.count()) == (constraints, events)


@pytest.mark.django_db(transaction=True)
def test_a_request_within_its_deadline_is_untouched(agent, mission, settings):
    settings.QUESTLOG_REQUEST_TIMEOUT = 5
    with mission_locked_elsewhere(mission["id"], release_after=0.5):
        assert agent.post(f"missions/{mission['id']}/constraints", {"text": "Only on weekdays"}).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_request_that_has_committed_is_allowed_to_finish_past_its_deadline(rf, settings, alice):
    """A 503 after a committed transaction would tell the client nothing was written when it was."""
    from django.db import transaction
    from django.http import HttpResponse

    from quests.middleware import RequestDeadlineExceeded, RequestDeadlineMiddleware
    from quests.models import Mission

    settings.QUESTLOG_REQUEST_TIMEOUT = 1

    def writes_then_reads_late(request):
        with transaction.atomic():
            Mission.objects.create(owner=alice, title="kept", objective="o")
        time.sleep(1.1)
        return HttpResponse(str(Mission.objects.count()))

    def reads_late(request):
        time.sleep(1.1)
        return HttpResponse(str(Mission.objects.count()))

    assert RequestDeadlineMiddleware(writes_then_reads_late)(rf.get("/")).content == b"1"
    with pytest.raises(RequestDeadlineExceeded):
        RequestDeadlineMiddleware(reads_late)(rf.get("/"))
    # The connection is itself again once the request is over.
    assert "commit" not in vars(connections["default"])
