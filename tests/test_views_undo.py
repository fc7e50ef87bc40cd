"""The confirmation after a decision (what happened, the quest, Undo) and the Undo action itself."""

import re
from datetime import timedelta

import pytest

from quests.models import Approval
from quests.services import approvals, runs
from tests.builders import agent_for, fast_password_hashing, person, waiting_on_approval, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


def decide(client, approval, **data):
    return client.post(f"/approvals/{approval.pk}/decide/", {"next": "/approvals/", **data}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="inbox")


def undo(client, approval, htmx: bool = True):
    extra = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "inbox"} if htmx else {}
    return client.post(f"/approvals/{approval.pk}/undo/", {"next": "/approvals/"}, **extra)


def test_a_decision_is_confirmed_with_its_quest_and_an_undo_button(alice_client, alice):
    mission, approval = waiting_on_approval(alice, "Ship the pricing page")
    body = decide(alice_client, approval, decision="approve").content.decode()
    assert "You approved “deploy to production”." in body
    assert f'href="/missions/{mission.pk}/">Ship the pricing page</a>' in body
    assert f'action="/approvals/{approval.pk}/undo/"' in body and ">Undo</button>" in body


def test_a_rejection_and_a_review_are_confirmed_in_their_own_words(alice_client, alice):
    agent = agent_for(alice)
    _, approval = waiting_on_approval(alice, agent=agent)
    _, milestone = waiting_on_gate(alice, agent=agent)
    decide(alice_client, approval, decision="reject", note="Not before Friday.")
    alice_client.post(f"/milestones/{milestone.pk}/review/", {"action": "approve", "next": "/approvals/"})
    body = alice_client.get("/approvals/").content.decode()
    assert "You rejected “deploy to production”." in body
    assert "You approved the milestone “Venues shortlisted”." in body
    # A milestone review has no undo; the rejection has.
    assert body.count(">Undo</button>") == 1


def test_no_undo_is_offered_once_a_run_has_started(alice_client, alice):
    agent = agent_for(alice)
    mission, approval = waiting_on_approval(alice, agent=agent)
    decide(alice_client, approval, decision="approve")
    runs.run_start(actor=agent, mission_id=mission.pk)
    body = alice_client.get("/approvals/").content.decode()
    assert "You approved “deploy to production”." in body and ">Undo</button>" not in body


def test_the_confirmation_goes_after_the_window(alice_client, alice, settings):
    mission, approval = waiting_on_approval(alice)
    decide(alice_client, approval, decision="approve")
    Approval.objects.filter(pk=approval.pk).update(decided_at=approval.created_at - timedelta(seconds=settings.QUESTLOG_UNDO_SECONDS + 1))
    assert "You approved" not in alice_client.get("/approvals/").content.decode()


def test_undo_puts_the_approval_back_in_the_inbox(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    decide(alice_client, approval, decision="approve")
    response = undo(alice_client, approval)
    body = response.content.decode()
    assert response.status_code == 200
    assert f'id="approval-{approval.pk}"' in body and "You approved" not in body
    approval.refresh_from_db()
    mission.refresh_from_db()
    assert approval.status == "pending" and mission.status == "waiting_for_approval"


def test_undo_without_javascript_redirects_back(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    response = undo(alice_client, approval, htmx=False)
    assert response.status_code == 302 and response["Location"] == "/approvals/"


def test_a_refused_undo_says_why_on_the_page(alice_client, alice):
    agent = agent_for(alice)
    mission, approval = waiting_on_approval(alice, agent=agent)
    decide(alice_client, approval, decision="approve")
    runs.run_start(actor=agent, mission_id=mission.pk)
    response = undo(alice_client, approval)
    assert response.status_code == 422
    assert "the agent has already started a run" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_another_persons_approval_cannot_be_undone(client, alice, bob):
    mission, approval = waiting_on_approval(alice)
    approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    client.force_login(bob)
    assert undo(client, approval, htmx=False).status_code == 404
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_a_reject_with_an_empty_note_is_refused(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    response = decide(alice_client, approval, decision="reject", note="   ")
    body = response.content.decode()
    assert response.status_code == 422 and "Say why you reject it" in body
    note = re.search(rf'<textarea id="note-{approval.pk}"[^>]*>', body).group(0)
    # Described by the error (and by its length counter, which every limited field has).
    assert 'aria-invalid="true"' in note and re.search(rf'aria-describedby="[^"]*\bapproval-{approval.pk}-error\b', note)
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_edit_and_approve_with_the_payload_unchanged_is_recorded_as_an_approve(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    body = decide(alice_client, approval, decision="edit", payload='{"version": "1.2", "environment": "production"}').content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "approved"
    assert "You approved “deploy to production”." in body


def test_the_mission_page_confirms_a_decision_made_there_with_undo(alice_client, alice):
    mission, approval = waiting_on_approval(alice, "Ship the pricing page")
    origin = f"/missions/{mission.pk}/"
    response = alice_client.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "approve", "next": origin},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="mission-body",
    )
    body = response.content.decode()
    assert "You approved “deploy to production”." in body and ">Undo</button>" in body
    # The quest's own page does not link to itself.
    confirmation = body[body.index('id="just-decided"') : body.index("</ul>", body.index('id="just-decided"'))]
    assert "Quest:" not in confirmation
    undone = alice_client.post(
        f"/approvals/{approval.pk}/undo/",
        {"next": origin},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="mission-body",
    ).content.decode()
    assert f'id="approval-{approval.pk}"' in undone and 'data-status="waiting_for_approval"' in undone


def test_the_mission_page_confirms_a_decision_and_reads_none_where_nothing_was_decided(alice_client, alice):
    """The page reads the person's recent decisions only on a quest where something was decided or
    reviewed: as a quest first waits (nothing decided yet) that read is two queries saved."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    mission, approval = waiting_on_approval(alice, "Ship the pricing page")
    with CaptureQueriesContext(connection) as undecided:
        body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "You approved" not in body
    assert not [q for q in undecided.captured_queries if "decided_by_id" in q["sql"] and "decided_at" in q["sql"] and ">=" in q["sql"]]
    decide(alice_client, approval, decision="approve")
    with CaptureQueriesContext(connection) as decided:
        body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "You approved “deploy to production”." in body and ">Undo</button>" in body
    assert len(decided) == len(undecided) + 2
