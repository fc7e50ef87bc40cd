"""While the database cannot be reached the API answers 503 with its JSON error body and
Retry-After, and the pages a plain error page, never Django's HTML 500. Unit-level: the queries of
one request are made to fail as a lost or refused connection makes them fail (the fault test with
a real PostgreSQL stopped and started again is elsewhere)."""

import json

import pytest
from django.db import connection
from django.db.utils import InterfaceError, OperationalError
from django.test import Client

from config.urls import handler500

pytestmark = pytest.mark.django_db


def refuse(execute, sql, params, many, context):
    raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')


@pytest.fixture
def closed_cursor(monkeypatch):
    """As psycopg answers once the server went away mid-request."""

    def cursor():
        raise InterfaceError("connection already closed")

    return lambda: monkeypatch.setattr(connection, "cursor", cursor)


def assert_api_unavailable(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "5"
    error = json.loads(response.content)["error"]
    assert error["code"] == "unavailable" and error["retry_after"] == 5 and "database" in error["message"]


def assert_page_unavailable(response) -> None:
    body = response.content.decode()
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "Questlog is briefly unavailable" in body and "Server Error" not in body


def test_the_api_answers_503_when_the_database_refuses_connections(agent, mission):
    with connection.execute_wrapper(refuse):
        assert_api_unavailable(agent.get(f"missions/{mission['id']}"))
        assert_api_unavailable(agent.post("missions", {"title": "t", "objective": "o"}))
    # Back: the same client goes on without a restart.
    assert agent.get(f"missions/{mission['id']}").status_code == 200


def test_the_api_answers_503_when_the_connection_is_lost(agent, mission, closed_cursor):
    closed_cursor()
    assert_api_unavailable(agent.get(f"missions/{mission['id']}"))


def test_a_database_error_outside_the_api_router_is_503_too(rf):
    """The 500 handler, for a database error raised before ninja sees an API request (in a
    middleware): Django calls it inside its `except` block, as here."""
    try:
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError:
        assert_api_unavailable(handler500(rf.get("/api/v1/missions")))
        assert_page_unavailable(handler500(rf.get("/missions/1/")))
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        assert handler500(rf.get("/api/v1/missions")).status_code == 500


def test_pages_show_a_plain_error_page(alice, mission):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    with connection.execute_wrapper(refuse):
        assert_page_unavailable(client.get("/"))
        assert_page_unavailable(client.get(f"/missions/{mission['id']}/"))
    assert client.get("/").status_code == 200


def test_the_login_page_shows_it_too(alice, closed_cursor):
    client = Client(raise_request_exception=False)
    closed_cursor()
    assert_page_unavailable(client.post("/accounts/login/", {"username": "alice", "password": "alice-password"}))


def test_other_errors_stay_a_500(alice, monkeypatch):
    client = Client(raise_request_exception=False)
    client.force_login(alice)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("quests.web.board.render_page", broken)
    assert client.get("/").status_code == 500
