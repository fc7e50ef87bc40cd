"""A kept PostgreSQL connection skips Django's health check (`SELECT 1`) while it is in steady
use, and is still checked, and replaced when broken, once it has been idle longer than the window
(config/postgresql/base.py). Each test drives its own connection to the test database through
requests as Django runs them (close_old_connections at the start and at the end), and a server
that closes it (pg_terminate_backend), on real PostgreSQL."""

import time
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection

from config.database import database_settings
from config.postgresql.base import DatabaseWrapper

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the window is config/postgresql's, PostgreSQL's backend: SQLite opens a connection per request and has no health check (the suite runs on PostgreSQL, so this never skips in make test)",
    ),
]


@pytest.fixture
def kept() -> Iterator[DatabaseWrapper]:
    """A persistent connection with health checks, as the settings give one, and a count of them."""
    settings_dict = {**connection.settings_dict, "CONN_MAX_AGE": 300, "CONN_HEALTH_CHECKS": True, "HEALTH_CHECK_WINDOW": 0.5}
    wrapper = DatabaseWrapper(settings_dict, alias="health_check_window")
    wrapper.checks = 0  # type: ignore[attr-defined]
    is_usable = wrapper.is_usable

    def counted() -> bool:
        wrapper.checks += 1  # type: ignore[attr-defined]
        return is_usable()

    wrapper.is_usable = counted  # type: ignore[method-assign]
    yield wrapper
    wrapper.close()


def request(wrapper: DatabaseWrapper) -> int:
    """One request that reads from the database, with Django's connection handling around it: the
    backend's pid."""
    wrapper.close_if_unusable_or_obsolete()  # request_started
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]
    finally:
        wrapper.close_if_unusable_or_obsolete()  # request_finished


def server_closes(wrapper: DatabaseWrapper, pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    # The backend is gone once the server no longer lists it.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} still runs")


def test_the_settings_give_the_backend_and_the_window_from_the_environment():
    url = "postgres://u:p@127.0.0.1:5432/questlog"
    assert database_settings({"DATABASE_URL": url}, "", may_pool=True)["ENGINE"] == "config.postgresql"
    assert database_settings({"DATABASE_URL": url}, "", may_pool=True)["HEALTH_CHECK_WINDOW"] == 0.5
    assert database_settings({"DATABASE_URL": url, "QUESTLOG_DB_HEALTH_CHECK_WINDOW": "0"}, "", may_pool=True)["HEALTH_CHECK_WINDOW"] == 0


def test_a_connection_in_steady_use_is_not_checked_again(kept):
    first = request(kept)  # a new connection: nothing to check
    for _ in range(5):
        assert request(kept) == first
    assert kept.checks == 0


def test_a_connection_idle_past_the_window_is_checked(kept):
    kept.settings_dict["HEALTH_CHECK_WINDOW"] = 0.05
    request(kept)
    request(kept)
    checks = kept.checks
    time.sleep(0.1)
    request(kept)
    assert kept.checks == checks + 1


def test_a_window_of_zero_checks_every_reuse(kept):
    kept.settings_dict["HEALTH_CHECK_WINDOW"] = 0
    request(kept)
    for reuse in range(1, 4):
        request(kept)
        assert kept.checks == reuse


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(kept):
    kept.settings_dict["HEALTH_CHECK_WINDOW"] = 0.05
    first = request(kept)
    request(kept)
    server_closes(kept, first)
    time.sleep(0.1)
    assert request(kept) != first  # checked, found closed, and a new connection answered


def test_a_connection_the_server_closed_within_the_window_fails_one_request_and_is_replaced(kept):
    first = request(kept)
    request(kept)
    server_closes(kept, first)
    with pytest.raises(OperationalError):
        request(kept)
    assert kept.connection is None  # closed as that request ended
    assert request(kept) != first
