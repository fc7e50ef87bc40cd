"""Where the parity tests run QuestlogSaver: against pytest-django's live server on the PostgreSQL
test database, and against `make serve` (scripts/serve: gunicorn) on the embedded SQLite default,
the same server the adapters' served tests start (one for the whole module: it migrates once)."""

import uuid
from collections.abc import Iterator

import pytest

from questlog_client.langgraph import QuestlogSaver
from quests.services.tokens import token_create
from tests.test_adapters_served import sqlite_users
from tests.test_serve import Server, serve


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory) -> Iterator[tuple[Server, object]]:
    tmp_path = tmp_path_factory.mktemp("questlog-sqlite")
    started: list[Server] = []
    server = serve(tmp_path, started)
    assert (tmp_path / "data" / "questlog.sqlite3").exists()
    yield server, tmp_path
    for each in started:
        each.stop()


# The SQLite side starts a server process: long, as the project marks those (`make test-long` runs it).
@pytest.fixture(params=["postgresql", pytest.param("sqlite", marks=pytest.mark.long)])
def database(request) -> tuple[str, str, str]:
    """(database, server URL, an agent token of a user of its own) for each database."""
    prefix = f"parity-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        server, tmp_path = request.getfixturevalue("sqlite_server")
        return "sqlite", server.url, sqlite_users(tmp_path, 1, prefix=prefix)[0]
    live_server = request.getfixturevalue("live_server")
    user = request.getfixturevalue("django_user_model").objects.create_user(prefix)
    return "postgresql", live_server.url, token_create(user=user, name="parity")[1]


@pytest.fixture
def questlog_saver(database) -> Iterator[QuestlogSaver]:
    _, url, token = database
    with QuestlogSaver(url, token, backoff=0.01) as saver:
        yield saver
