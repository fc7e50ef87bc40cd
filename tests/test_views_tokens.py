"""Agent tokens /tokens/: create (shown once), list by name and last use, revoke."""

import html
import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quests.models import AgentToken, Mission, MissionStatus
from quests.selectors.people import TOKENS_PAGE_SIZE
from quests.services.tokens import token_authenticate, token_create
from tests.builders import fast_password_hashing, new_mission  # noqa: F401

pytestmark = pytest.mark.django_db


def test_a_new_token_is_shown_once_and_works(alice_client, alice):
    response = alice_client.post("/tokens/", {"name": "laptop agent"})
    body = response.content.decode()
    assert response.status_code == 200
    token = AgentToken.objects.get(user=alice, name="laptop agent")
    start = body.index('id="new-token-value"')
    raw = body[start:].split('value="', 1)[1].split('"', 1)[0]
    assert raw.startswith(token.prefix)
    assert token_authenticate(raw) == token
    assert raw not in alice_client.get("/tokens/").content.decode()


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx fragment"])
def test_the_answer_that_shows_a_new_token_is_never_stored(alice_client, htmx):
    """Issue 24, finding 5: a new token in clear must not be kept by the browser's cache, a proxy or
    the back button: Cache-Control: no-store on that answer, and on the page's others alike."""
    extra = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "tokens"} if htmx else {}
    created = alice_client.post("/tokens/", {"name": "laptop agent"}, **extra)
    assert created.status_code == 200 and 'id="new-token-value"' in created.content.decode()
    for response in (created, alice_client.get("/tokens/", **extra), alice_client.post("/tokens/", {"name": ""}, **extra)):
        directives = {part.strip() for part in response["Cache-Control"].split(",")}
        assert {"no-store", "no-cache", "private"} <= directives, response["Cache-Control"]


def test_a_token_can_be_limited_to_one_of_the_users_missions(alice_client, alice, bob):
    mine = new_mission(alice)
    bobs = new_mission(bob)
    alice_client.post("/tokens/", {"name": "one mission", "mission": mine.pk})
    assert AgentToken.objects.get(name="one mission").mission_id == mine.pk
    response = alice_client.post("/tokens/", {"name": "sneaky", "mission": bobs.pk})
    assert response.status_code == 422
    assert not AgentToken.objects.filter(name="sneaky").exists()


def test_a_token_needs_a_name(alice_client):
    response = alice_client.post("/tokens/", {"name": ""})
    assert response.status_code == 422
    assert "Give the token a name" in response.content.decode()


def test_it_lists_tokens_by_name_and_last_use_and_revokes(alice_client, alice, bob):
    token, raw = token_create(user=alice, name="worker")
    token_authenticate(raw)
    token_create(user=bob, name="bob token")
    body = alice_client.get("/tokens/").content.decode()
    assert "worker" in body and ">just now</time>" in body and "bob token" not in body
    response = alice_client.post(f"/tokens/{token.pk}/revoke/", {"next": "/tokens/"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tokens")
    assert response.status_code == 200 and "Revoked" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert token_authenticate(raw) is None


def test_another_users_token_cannot_be_revoked(client, alice, bob):
    token, _ = token_create(user=alice, name="worker")
    client.force_login(bob)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


# ---- the mission picker and the token list, whatever the number of missions and tokens ----------


def open_missions(user, count: int, title: str = "Trip") -> list[Mission]:
    """Missions straight into the table: the picker reads rows, it does not care how they were made."""
    now = timezone.now()
    made = Mission.objects.bulk_create(Mission(owner=user, title=f"{title} {i}", objective="Plan it.", status=MissionStatus.READY) for i in range(count))
    # Newest activity last, so "newest first" is a visible order.
    for i, mission in enumerate(made):
        Mission.objects.filter(pk=mission.pk).update(updated_at=now + timedelta(seconds=i))
    return made


def radios(body: str) -> list[str]:
    """The mission ids offered as choices, in page order (the "All my missions" choice left out)."""
    return re.findall(r'<input type="radio" name="mission" value="(\d+)"', body)


def page_of(client, url: str, **extra) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **extra)
    assert response.status_code == 200
    return len(response.content), len(captured)


def test_the_tokens_page_has_the_same_size_and_queries_with_3_and_300_missions(alice_client, alice):
    open_missions(alice, 3)
    size_3, queries_3 = page_of(alice_client, "/tokens/")
    open_missions(alice, 297, title="More")
    size_300, queries_300 = page_of(alice_client, "/tokens/")
    assert abs(size_300 - size_3) <= 8
    assert queries_300 == queries_3
    body = alice_client.get("/tokens/").content.decode()
    assert 'value="" checked' in body and "All my quests" in body
    assert radios(body) == []


def test_a_search_offers_at_most_20_open_missions_newest_activity_first(alice_client, alice, bob):
    made = open_missions(alice, 30)
    Mission.objects.filter(pk=made[-1].pk).update(status=MissionStatus.COMPLETED)
    Mission.objects.filter(pk=made[-2].pk).update(status=MissionStatus.CANCELLED)
    open_missions(bob, 1, title="Trip of bob")
    body = alice_client.get("/tokens/?mission_q=trip").content.decode()
    expected = [str(m.pk) for m in reversed(made[:-2])][:20]
    assert radios(body) == expected
    assert "Trip of bob" not in body
    assert "the 20 with the newest activity" in body
    assert radios(alice_client.get("/tokens/?mission_q=trip+29").content.decode()) == []
    body = alice_client.get("/tokens/?mission_q=nothing-like-it").content.decode()
    assert "No open quest matches" in body


def test_the_search_with_htmx_answers_only_the_choices(alice_client, alice):
    made = open_missions(alice, 3)
    response = alice_client.get("/tokens/?mission_q=trip+1", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="mission-choices")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="mission-choices"') and "<html" not in body
    assert radios(body) == [str(made[1].pk)]


def test_the_chosen_mission_stays_offered_when_the_search_changes(alice_client, alice):
    made = open_missions(alice, 3)
    body = alice_client.get(f"/tokens/?mission_q=nothing-like-it&mission={made[0].pk}").content.decode()
    assert radios(body) == [str(made[0].pk)]
    assert f'value="{made[0].pk}" checked' in body


def test_find_without_javascript_keeps_the_name_and_creates_nothing(alice_client, alice):
    made = open_missions(alice, 3)
    response = alice_client.post("/tokens/", {"name": "laptop agent", "mission_q": "trip 2", "find": "1"})
    body = response.content.decode()
    assert response.status_code == 200
    assert not AgentToken.objects.filter(user=alice).exists()
    assert 'value="laptop agent"' in body and 'value="trip 2"' in body
    assert radios(body) == [str(made[2].pk)]


@pytest.mark.parametrize("choice", ["closed", "bobs", "missing", "abc"])
def test_a_mission_that_is_not_one_of_the_persons_open_missions_is_a_form_error(alice_client, alice, bob, choice):
    (closed,) = open_missions(alice, 1)
    Mission.objects.filter(pk=closed.pk).update(status=MissionStatus.COMPLETED)
    (bobs,) = open_missions(bob, 1)
    value = {"closed": closed.pk, "bobs": bobs.pk, "missing": 10**12, "abc": "abc"}[choice]
    response = alice_client.post("/tokens/", {"name": "laptop agent", "mission": value})
    body = response.content.decode()
    assert response.status_code == 422
    assert "not one of your open quests" in body
    assert 'value="laptop agent"' in body
    assert not AgentToken.objects.filter(user=alice).exists()


def test_the_token_list_is_paged_with_its_exact_count(alice_client, alice):
    for i in range(TOKENS_PAGE_SIZE + 5):
        token_create(user=alice, name=f"agent {i:02d}")
    body = alice_client.get("/tokens/").content.decode()
    assert body.count(">Revoke</button>") == TOKENS_PAGE_SIZE
    assert f"{TOKENS_PAGE_SIZE + 5} tokens" in body and "Page 1 of 2" in body
    body = alice_client.get("/tokens/?page=2").content.decode()
    assert body.count(">Revoke</button>") == 5 and "agent 29" in body


def test_revoking_from_the_second_page_answers_with_the_second_page(alice_client, alice):
    tokens = [token_create(user=alice, name=f"agent {i:02d}")[0] for i in range(TOKENS_PAGE_SIZE + 5)]
    last = tokens[-1]
    response = alice_client.post(f"/tokens/{last.pk}/revoke/", {"next": "/tokens/?page=2"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tokens")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Page 2 of 2" in body and "agent 29" in body
    assert alice_client.post(f"/tokens/{tokens[0].pk}/revoke/", {"next": "/tokens/?page=2"})["Location"] == "/tokens/?page=2"


def test_a_new_token_comes_with_its_mcp_host_configuration(alice_client, alice):
    body = alice_client.post("/tokens/", {"name": "desktop host"}).content.decode()
    raw = body[body.index('id="new-token-value"') :].split('value="', 1)[1].split('"', 1)[0]

    def config(block_id: str) -> dict:
        start = body.index(f'id="{block_id}"')
        return json.loads(html.unescape(body[start:].split("<code>", 1)[1].split("</code>", 1)[0]))["mcpServers"]["questlog"]

    assert config("mcp-http") == {"type": "http", "url": "http://testserver/mcp", "headers": {"Authorization": f"Bearer {raw}"}}
    assert config("mcp-stdio") == {"command": "questlog-mcp", "env": {"QUESTLOG_URL": "http://testserver", "QUESTLOG_TOKEN": raw}}
    assert "mcp-http" not in alice_client.get("/tokens/").content.decode()  # shown with the new token only
