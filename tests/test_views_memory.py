"""/memory/: what Questlog remembers about a person, and the proposals waiting for their decision.
Nothing becomes long-term memory without that person's consent."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from quests.models import MemoryItem, MemoryProposal

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def propose(agent, run, name: str = "tone", value: str = "formal", reason: str = "You asked for it twice") -> MemoryProposal:
    r = agent.post(f"runs/{run['id']}/memory-proposals", {"name": name, "value": value, "reason": reason})
    assert r.status_code == 201, r.content
    return MemoryProposal.objects.get(pk=r.json()["id"])


def test_it_needs_a_signed_in_person():
    r = Client().get("/memory/")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


def test_it_shows_pending_proposals_with_their_reason(web, agent, mission, run):
    propose(agent, run, reason="You corrected the tone twice")
    r = web.get("/memory/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "What Questlog remembers about you" in html
    assert "tone" in html and "formal" in html and "You corrected the tone twice" in html
    assert "Remember" in html and "Don't remember" in html
    assert mission["title"] in html


def test_memory_never_exists_without_consent(web, agent, mission, run):
    proposal = propose(agent, run)
    assert not MemoryItem.objects.exists()
    assert agent.get("memory").json() == {"items": []}
    assert agent.get(f"missions/{mission['id']}/resume").json()["memory"] == []
    # An agent cannot decide for the person, through the API or the page.
    assert agent.post(f"memory-proposals/{proposal.pk}/decision", {"decision": "approve"}).status_code == 403
    assert agent.post(f"/memory/proposals/{proposal.pk}/decide/", raw="decision=approve").status_code == 302
    assert not MemoryItem.objects.exists()

    r = web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "decline"})
    assert r.status_code == 302
    assert MemoryProposal.objects.get(pk=proposal.pk).status == "declined"
    assert not MemoryItem.objects.exists()
    assert "tone" not in web.get("/memory/").content.decode().split("Remembered")[1]


def test_remember_makes_a_memory_item_with_its_source_and_expiry(web, alice, agent, mission, run):
    proposal = propose(agent, run)
    r = web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"}, follow=True)
    assert r.status_code == 200
    item = MemoryItem.objects.get(owner=alice)
    assert item.source_mission_id == mission["id"] and item.proposal_id == proposal.pk
    assert abs(item.expires_at - (timezone.now() + timedelta(days=365))) < timedelta(minutes=1)
    html = r.content.decode()
    assert "Remembered." in html
    assert item.expires_at.strftime("%Y") in html
    assert f'href="/missions/{mission["id"]}/"' in html
    assert agent.get("memory").json()["items"][0]["name"] == "tone"


def test_deciding_twice_is_a_message_not_an_error(web, agent, run):
    proposal = propose(agent, run)
    web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    r = web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "decline"}, follow=True)
    assert r.status_code == 200
    assert "already approved" in r.content.decode()
    assert MemoryItem.objects.count() == 1


def test_a_bad_decision_is_a_message(web, agent, run):
    proposal = propose(agent, run)
    r = web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "maybe"}, follow=True)
    assert r.status_code == 200
    assert "Choose Remember or Don" in r.content.decode()
    assert MemoryProposal.objects.get(pk=proposal.pk).status == "pending"


def test_forget_deletes_the_item_now(web, alice, agent, run):
    proposal = propose(agent, run)
    web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    item = MemoryItem.objects.get(owner=alice)
    r = web.post(f"/memory/items/{item.pk}/forget/", follow=True)
    assert r.status_code == 200
    assert not MemoryItem.objects.filter(pk=item.pk).exists()
    assert "Forgotten" in r.content.decode()


def test_keep_another_year_renews_the_expiry(web, alice, agent, run):
    proposal = propose(agent, run)
    web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    item = MemoryItem.objects.get(owner=alice)
    MemoryItem.objects.filter(pk=item.pk).update(expires_at=timezone.now() + timedelta(days=2))
    web.post(f"/memory/items/{item.pk}/renew/")
    item.refresh_from_db()
    assert item.expires_at > timezone.now() + timedelta(days=364)


def test_an_expired_item_is_shown_as_such_until_the_purge(web, alice, agent, run):
    proposal = propose(agent, run)
    web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    MemoryItem.objects.filter(owner=alice).update(expires_at=timezone.now() - timedelta(days=1))
    assert "expired" in web.get("/memory/").content.decode()


def test_another_persons_memory_is_not_there(bob, web, bob_agent, alice, agent, run):
    bob_mission = bob_agent.post("missions", {"title": "Bob's", "objective": "x"}).json()
    bob_run = bob_agent.post(f"missions/{bob_mission['id']}/runs", {}).json()["run"]
    bobs = propose(bob_agent, bob_run, name="bob-secret-pref", value="bob-secret-value")
    html = web.get("/memory/").content.decode()
    assert "bob-secret" not in html
    assert web.post(f"/memory/proposals/{bobs.pk}/decide/", {"decision": "approve"}).status_code == 404
    assert not MemoryItem.objects.exists()
    bob_client = Client()
    bob_client.force_login(bob)
    bob_client.post(f"/memory/proposals/{bobs.pk}/decide/", {"decision": "approve"})
    bob_item = MemoryItem.objects.get(owner=bob)
    assert web.post(f"/memory/items/{bob_item.pk}/forget/").status_code == 404
    assert web.post(f"/memory/items/{bob_item.pk}/renew/").status_code == 404
    assert MemoryItem.objects.filter(pk=bob_item.pk).exists()


def test_the_forms_need_a_csrf_token(alice, agent, run):
    proposal = propose(agent, run)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"}).status_code == 403
    assert not MemoryItem.objects.exists()


def test_with_htmx_a_decision_answers_with_the_memory_fragment_and_its_message(web, agent, run):
    proposal = propose(agent, run)
    htmx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "memory-body"}
    r = web.post(f"/memory/proposals/{proposal.pk}/decide/", {"decision": "approve"}, **htmx)
    assert r.status_code == 200
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="memory-body"') and "<html" not in html
    assert "Remembered." in html and "formal" in html
    item = MemoryItem.objects.get(owner=proposal.owner)

    r = web.post(f"/memory/items/{item.pk}/forget/", **htmx)
    assert r.status_code == 200 and "Forgotten" in r.content.decode()
    assert not MemoryItem.objects.filter(pk=item.pk).exists()
    # The message went with the fragment; the next full page does not show it again.
    assert "Forgotten" not in web.get("/memory/").content.decode()


def test_with_htmx_the_memory_page_renders_just_its_fragment(web):
    r = web.get("/memory/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="memory-body")
    assert r.status_code == 200 and "<html" not in r.content.decode()
    assert 'id="memory-body"' in r.content.decode()
