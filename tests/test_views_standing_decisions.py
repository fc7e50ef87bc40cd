"""The decision form's "Always" checkbox, the quest page's standing decisions and their revoking,
and a graph approval saying which of its node's questions it is."""

import pytest

from quests.models import Approval, StandingDecision
from quests.services import approvals
from tests.builders import agent_for, fast_password_hashing, person as person_actor, running, waiting_on_approval  # noqa: F401

pytestmark = pytest.mark.django_db


def test_always_from_the_inbox_makes_a_standing_decision_shown_on_the_quest_page(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    body = alice_client.get("/approvals/").content.decode()
    assert 'name="always"' in body and "Always, for every call of <code>deploy to production</code> in this quest" in body

    response = alice_client.post(f"/approvals/{approval.pk}/decide/", {"next": "/approvals/", "decision": "approve", "always": "on"})
    assert response.status_code == 302
    standing = StandingDecision.objects.get()
    assert (standing.mission_id, standing.action, standing.decision, standing.revoked_at) == (mission.pk, "deploy to production", "approve", None)
    page = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    section = page[page.index('id="standing-decisions"') :]
    assert "Always approve" in section and "deploy to production" in section and ">Revoke<" in section


def test_revoking_from_the_quest_page_asks_again(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    alice_client.post(f"/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "Never on a Friday.", "always": "on"})
    standing = StandingDecision.objects.get()
    response = alice_client.post(
        f"/missions/{mission.pk}/standing-decisions/{standing.pk}/revoke/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="mission-body",
    )
    assert response.status_code == 200 and "Revoked" in response.content.decode()
    standing.refresh_from_db()
    assert standing.revoked_at is not None

    again = alice_client.post(f"/missions/{mission.pk}/standing-decisions/{standing.pk}/revoke/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="mission-body")
    assert "already revoked" in again.content.decode()


def test_an_edit_with_always_is_a_form_error_and_nothing_changes(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    response = alice_client.post(
        f"/approvals/{approval.pk}/decide/",
        {"next": "/approvals/", "decision": "edit", "payload": '{"environment": "staging"}', "always": "on"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="inbox",
    )
    assert "An edit answers one call" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "pending" and not StandingDecision.objects.exists()


def test_someone_else_cannot_revoke(client, alice, bob):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(actor=person_actor(alice), approval_id=approval.pk, decision="approve", always=True)
    client.force_login(bob)
    standing = StandingDecision.objects.get()
    assert client.post(f"/missions/{mission.pk}/standing-decisions/{standing.pk}/revoke/").status_code == 404
    assert StandingDecision.objects.get().revoked_at is None


def test_a_graph_question_says_which_of_its_nodes_questions_it_is(alice_client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, "Plan the offsite", agent=agent)
    approvals.approvals_request(
        actor=agent,
        run_id=run.pk,
        items=[
            {"action": "send the invitations", "payload": {"to": "team"}, "reason": "Emails cannot be unsent.", "node": "book_and_invite", "question": 2},
        ],
    )
    page = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "The graph waits on question 2 of its node <code>book_and_invite</code>; the earlier ones are decided." in page
