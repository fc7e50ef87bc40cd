"""PersonTimeZoneMiddleware leaves an agent's API request alone: the session that comes along
with a bearer token (an agent run from a signed-in browser, a test client) is never loaded for a
time zone the API's answers do not use; a person's pages keep their zone."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quests.middleware import is_agent_api_request
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db


def session_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries if "django_session" in q["sql"]]


def test_an_agent_request_does_not_load_the_session_that_comes_with_it(alice, mission):
    _, raw = token_create(user=alice, name="agent")
    client = Client()
    client.force_login(alice)  # a session cookie on every request of this client
    path = f"/api/v1/missions/{mission['id']}"
    with CaptureQueriesContext(connection) as as_agent:
        assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    assert session_queries(as_agent) == []
    # The same request by the person herself still reads her session.
    with CaptureQueriesContext(connection) as as_person:
        assert client.get(path).status_code == 200
    assert session_queries(as_person) != []


@pytest.mark.parametrize(
    ("path", "authorization", "agent"),
    [
        ("/api/v1/missions", "Bearer abc", True),
        ("/api/v1/missions", "bearer abc", True),  # the scheme is case-insensitive, as ninja reads it
        ("/api/v1/missions", "", False),
        ("/api/v1/missions", "Basic abc", False),
        ("/missions/", "Bearer abc", False),  # a page is a person's, whatever header comes along
    ],
)
def test_what_counts_as_an_agent_api_request(rf, path, authorization, agent):
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    assert is_agent_api_request(rf.get(path, **extra)) is agent
