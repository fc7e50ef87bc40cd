"""The retention panel on the mission page: keep this quest's history or withdraw that choice,
and delete a finished quest now, after confirmation, through the same purge path and log."""

import pytest
from django.test import Client

from checkpoints.models import Checkpoint, PurgeLog
from quests.models import Hold, Mission

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_web(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client


def complete(agent, run) -> None:
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"tmp": "/tmp/x"}})
    assert agent.post(f"runs/{run['id']}/stop", {"reason": "completed"}).status_code == 200


def panel(client: Client, mission_id: int) -> str:
    r = client.get(f"/missions/{mission_id}/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="retention"' in html
    return html[html.index('id="retention"') :]


def test_an_active_missions_panel_says_nothing_expires_yet(web, mission, run):
    html = panel(web, mission["id"])
    assert "Nothing of this quest expires while it is active" in html
    assert "Keep this quest&#x27;s history" in html or "Keep this quest's history" in html
    assert "Delete its history now" not in html


def test_the_owner_keeps_the_history_and_withdraws_it(web, agent, mission, run):
    complete(agent, run)
    r = web.post(f"/missions/{mission['id']}/retention/keep/")
    assert r.status_code == 302 and r["Location"] == f"/missions/{mission['id']}/#retention"
    m = Mission.objects.get(pk=mission["id"])
    assert m.retention_approved_at is not None
    html = panel(web, mission["id"])
    assert "You chose to keep its history" in html and "Withdraw" in html
    assert agent.get(f"missions/{mission['id']}").json()["retention_approved_at"] is not None

    web.post(f"/missions/{mission['id']}/retention/withdraw/")
    assert Mission.objects.get(pk=mission["id"]).retention_approved_at is None


def test_keeping_twice_is_a_message_not_an_error(web, mission):
    web.post(f"/missions/{mission['id']}/retention/keep/")
    r = web.post(f"/missions/{mission['id']}/retention/keep/", follow=True)
    assert r.status_code == 200
    assert "already chose" in r.content.decode()


def test_another_user_cannot_touch_a_missions_retention(bob_web, agent, mission, run):
    complete(agent, run)
    assert bob_web.post(f"/missions/{mission['id']}/retention/keep/").status_code == 404
    assert bob_web.post(f"/missions/{mission['id']}/retention/withdraw/").status_code == 404
    assert bob_web.get(f"/missions/{mission['id']}/retention/delete/").status_code == 404
    assert bob_web.post(f"/missions/{mission['id']}/retention/delete/", {"confirmed": "yes"}).status_code == 404
    m = Mission.objects.get(pk=mission["id"])
    assert m.retention_approved_at is None and m.purged_at is None


def test_the_owner_deletes_a_finished_mission_after_confirmation(web, agent, mission, run):
    complete(agent, run)
    assert "Delete its history now" in panel(web, mission["id"])
    r = web.get(f"/missions/{mission['id']}/retention/delete/")
    assert r.status_code == 200
    assert "This cannot be undone" in r.content.decode()
    # Without the confirmation the page is shown again and nothing happens.
    assert web.post(f"/missions/{mission['id']}/retention/delete/").status_code == 200
    assert Mission.objects.get(pk=mission["id"]).purged_at is None

    r = web.post(f"/missions/{mission['id']}/retention/delete/", {"confirmed": "yes"}, follow=True)
    assert r.status_code == 200
    assert Mission.objects.get(pk=mission["id"]).purged_at is not None
    assert not Checkpoint.objects.filter(mission_id=mission["id"]).exists()
    log = PurgeLog.objects.get()
    assert (log.trigger, log.actor, log.dry_run, log.counts["missions"]) == ("owner", "user:alice", False, 1)
    assert "was deleted on" in panel(web, mission["id"])
    assert agent.get(f"missions/{mission['id']}/checkpoints").json() == {"items": []}


def test_an_active_mission_cannot_be_deleted_now(web, mission, run):
    r = web.get(f"/missions/{mission['id']}/retention/delete/")
    assert "Only a finished quest" in r.content.decode()
    r = web.post(f"/missions/{mission['id']}/retention/delete/", {"confirmed": "yes"}, follow=True)
    assert "Only a finished quest" in r.content.decode()
    assert Mission.objects.get(pk=mission["id"]).purged_at is None
    assert not PurgeLog.objects.exists()


def test_a_held_mission_cannot_be_deleted_now(web, agent, mission, run, django_user_model):
    complete(agent, run)
    Hold.objects.create(mission_id=mission["id"], reason="Legal", placed_by=django_user_model.objects.create_user("sam", is_staff=True))
    r = web.post(f"/missions/{mission['id']}/retention/delete/", {"confirmed": "yes"}, follow=True)
    assert "cannot be deleted right now" in r.content.decode()
    assert Mission.objects.get(pk=mission["id"]).purged_at is None


def test_the_actions_need_post_and_csrf(alice, mission):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get(f"/missions/{mission['id']}/retention/keep/").status_code == 405
    assert client.post(f"/missions/{mission['id']}/retention/keep/").status_code == 403
    assert Mission.objects.get(pk=mission["id"]).retention_approved_at is None


def test_with_htmx_keeping_swaps_the_mission_body(web, agent, mission, run):
    complete(agent, run)
    htmx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "mission-body"}
    r = web.post(f"/missions/{mission['id']}/retention/keep/", **htmx)
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="mission-body"' in html and "<html" not in html
    assert "You chose to keep its history" in html
    assert Mission.objects.get(pk=mission["id"]).retention_approved_at is not None

    r = web.post(f"/missions/{mission['id']}/retention/keep/", **htmx)
    assert r.status_code == 422 and "already chose" in r.content.decode()


def test_with_htmx_another_users_mission_is_still_a_404(bob_web, agent, mission, run):
    complete(agent, run)
    r = bob_web.post(f"/missions/{mission['id']}/retention/keep/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="mission-body")
    assert r.status_code == 404
