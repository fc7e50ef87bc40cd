"""Agent tokens /tokens/: create (shown once), list by name and last use, revoke."""

import pytest

from quests.models import AgentToken
from quests.services.tokens import token_authenticate, token_create
from tests.builders import fast_password_hashing, new_mission  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


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
    assert "worker" in body and "ago" in body and "bob token" not in body
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
