"""Issue 23, the person's side: a decision sent after the session ended, text limits, the
correction rule, what waits (named, ordered, counted), times in the person's zone, and the
withdrawn approval of a cancelled quest."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from quests import limits
from quests.api import api
from quests.models import Approval, ApprovalStatus, Constraint, ConstraintSource, PersonSettings
from quests.services import approvals, memory, milestones, missions
from quests.services.errors import Conflict, InvalidInput
from quests.services.preferences import SESSION_TIME_ZONE
from quests.templatetags.questlog import when
from tests.builders import agent_for, person, running, waiting_on_approval, waiting_on_gate

pytestmark = pytest.mark.django_db


# --- 1. An htmx request after the session ended ----------------------------------------------------


def test_a_decision_sent_after_logging_out_redirects_htmx_to_the_login_and_comes_back_to_be_sent_again(client, alice):
    mission, approval = waiting_on_approval(alice)
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "approve", "note": "Ship it on Monday", "next": "/approvals/"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="inbox",
        HTTP_HX_CURRENT_URL="http://testserver/approvals/?page=1",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=%2Fapprovals%2F%3Fpage%3D1"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    login_page = client.get("/accounts/login/?next=/approvals/").content.decode()
    assert "what you just sent was not applied" in login_page
    assert client.post("/accounts/login/", {"username": "alice", "password": "alice-password"}).status_code == 302
    body = client.get("/approvals/").content.decode()
    assert "your “Approve” was not applied and nothing changed" in body
    assert "Ship it on Monday" in body  # what was typed is there to send again
    assert f'id="approval-{approval.pk}-error"' in body
    # Shown once: the next visit is the plain page.
    assert "was not applied" not in client.get("/approvals/").content.decode()


def test_an_htmx_request_without_a_session_from_another_site_goes_back_home(client, alice):
    response = client.get("/approvals/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="https://evil.example/approvals/")
    assert response["HX-Redirect"] == "/accounts/login/?next=%2F"


def test_a_plain_request_without_a_session_is_redirected_as_before(client):
    response = client.get("/approvals/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --- 5. The correction rule --------------------------------------------------------------------------


def test_approving_a_milestone_with_text_makes_the_text_a_constraint(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    response = alice_client.post(f"/milestones/{milestone.pk}/review/", {"action": "approve", "note": "  Keep it under 4,000 EUR  "})
    assert response.status_code == 302
    constraint = Constraint.objects.get(mission=mission, source=ConstraintSource.CORRECTION)
    assert constraint.text == "Keep it under 4,000 EUR" and constraint.source == ConstraintSource.CORRECTION
    milestone.refresh_from_db()
    assert milestone.review_status == "approved" and milestone.checkpoint.verified


def test_approving_without_text_adds_no_constraint(alice):
    mission, milestone = waiting_on_gate(alice)
    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="approve", note="  ")
    assert not Constraint.objects.filter(mission=mission, source=ConstraintSource.CORRECTION).exists()


def test_the_review_form_says_the_text_becomes_a_constraint_whichever_button(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert "becomes a constraint the agent must follow, whichever button you press" in body


# --- 6. One limit per kind of text ---------------------------------------------------------------


def test_a_correction_longer_than_a_constraint_is_refused_so_every_constraint_can_be_edited(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    too_long = "x" * (limits.CONSTRAINT_TEXT + 1)
    response = alice_client.post(f"/milestones/{milestone.pk}/review/", {"action": "correct", "note": too_long, "next": f"/missions/{mission.pk}/"})
    assert response.status_code == 422
    assert f"at most {limits.REVIEW_NOTE:,} characters" in response.content.decode()
    with pytest.raises(InvalidInput):
        milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="correct", note=too_long)
    assert not Constraint.objects.filter(mission=mission, source=ConstraintSource.CORRECTION).exists()
    at_limit = "y" * limits.CONSTRAINT_TEXT
    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="correct", note=at_limit)
    constraint = Constraint.objects.get(mission=mission, source=ConstraintSource.CORRECTION)
    edited = alice_client.post(f"/missions/{mission.pk}/constraints/{constraint.pk}/edit/", {"text": at_limit[:-1] + "z"})
    assert edited.status_code == 302


def test_the_service_refuses_a_constraint_over_the_limit_from_any_caller(alice):
    mission, run = running(alice)
    with pytest.raises(InvalidInput) as refused:
        missions.constraint_add(actor=agent_for(alice), mission_id=mission.pk, text="z" * (limits.CONSTRAINT_TEXT + 1))
    assert refused.value.extra["limit"] == limits.CONSTRAINT_TEXT


def test_the_api_schema_states_the_same_limits():
    schemas = api.get_openapi_schema()["components"]["schemas"]
    assert schemas["ConstraintIn"]["properties"]["text"]["maxLength"] == limits.CONSTRAINT_TEXT
    assert schemas["ReviewIn"]["properties"]["note"]["maxLength"] == limits.REVIEW_NOTE
    assert schemas["DecisionIn"]["properties"]["note"]["maxLength"] == limits.DECISION_NOTE


def test_the_api_refuses_a_review_note_over_the_limit(bob_person, bob):
    mission, milestone = waiting_on_gate(bob)
    response = bob_person.post(f"milestones/{milestone.pk}/review", {"action": "correct", "note": "n" * (limits.REVIEW_NOTE + 1)})
    assert response.status_code == 422


def test_the_fields_show_their_limit(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    missions.constraint_add(actor=person(alice), mission_id=mission.pk, text="Stay under budget")
    approvals_mission, approval = waiting_on_approval(alice, "Another")
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert f'id="new-constraint" name="text" rows="2" required maxlength="{limits.CONSTRAINT_TEXT}"' in body
    assert f'maxlength="{limits.REVIEW_NOTE}" data-counter="correction-{milestone.pk}-count"' in body
    assert f'<p class="hint counter" id="new-constraint-count" data-limit="{limits.CONSTRAINT_TEXT}">Up to 2,000 characters.</p>' in body
    assert re.search(rf'id="constraint-\d+-text" name="text" rows="2" required maxlength="{limits.CONSTRAINT_TEXT}"', body)
    inbox = alice_client.get("/approvals/").content.decode()
    assert f'id="note-{approval.pk}" name="note" rows="2" maxlength="{limits.DECISION_NOTE}"' in inbox


# --- 7. What needs me ------------------------------------------------------------------------------


def test_a_quest_waiting_on_a_gate_names_the_review_in_its_status_and_its_approvals_panel(alice_client, alice):
    mission, milestone = waiting_on_gate(alice)
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert 'id="mission-status">Waiting for your review</span>' in body
    assert "The quest waits for your review of the milestone " in body and f'href="#milestone-{milestone.pk}"' in body
    board = alice_client.get("/").content.decode()
    assert "Waiting for your review</span>" in board
    other, approval = waiting_on_approval(alice, "Needs an approval")
    assert 'id="mission-status">Waiting for approval</span>' in alice_client.get(f"/missions/{other.pk}/").content.decode()


def test_the_inbox_puts_what_blocks_an_agent_first_then_the_nearest_deadline_then_the_oldest(alice_client, alice):
    agent = agent_for(alice)
    quiet, run = running(alice, "Not blocking", agent=agent)
    non_gate, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="A note of progress", gate=False)
    _, old_gate = waiting_on_gate(alice, "Old gate", agent=agent)
    _, late = waiting_on_approval(alice, "Late deadline", action="send late", agent=agent)
    _, soon = waiting_on_approval(alice, "Soon deadline", action="send soon", agent=agent)
    Approval.objects.filter(pk=late.pk).update(respond_by=timezone.now() + timedelta(days=2))
    Approval.objects.filter(pk=soon.pk).update(respond_by=timezone.now() + timedelta(hours=1))
    body = alice_client.get("/approvals/").content.decode()
    order = re.findall(r'<article class="item (approval|milestone)[^"]*" id="\w+-(\d+)"', body)
    assert order == [("approval", str(soon.pk)), ("approval", str(late.pk)), ("milestone", str(old_gate.pk)), ("milestone", str(non_gate.pk))]


def test_a_pending_plan_milestone_is_not_badged_approved(alice_client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    milestones.milestone_claim(actor=agent, run_id=run.pk, kind="plan_approved", title="The plan", gate=True)
    body = alice_client.get(f"/missions/{mission.pk}/").content.decode()
    assert '<span class="badge kind">Plan</span>' in body and "Plan approved" not in body


def test_a_waiting_memory_proposal_is_counted_in_the_inbox_badge_and_named_in_the_inbox(alice_client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    memory.memory_propose(actor=agent, run_id=run.pk, name="Seat", value="Aisle", reason="Asked twice.")
    board = alice_client.get("/").content.decode()
    assert 'data-count="1"' in board
    inbox = alice_client.get("/approvals/").content.decode()
    assert 'data-count="1"' in inbox and "1 memory proposal also waits for your decision" in inbox


# --- 8. Times ----------------------------------------------------------------------------------------


def test_times_are_shown_in_the_browsers_zone_with_its_name(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    Approval.objects.filter(pk=approval.pk).update(respond_by=timezone.datetime(2030, 12, 3, 19, 3, tzinfo=timezone.UTC))
    alice_client.cookies["questlog_tz"] = "America/Los_Angeles"
    body = alice_client.get("/approvals/").content.decode()
    assert '<time datetime="2030-12-03T19:03:00+00:00" title="Dec 3, 2030, 11:03 PST">Dec 3, 2030, 11:03 PST</time>' in body
    assert ">just now</time>" in body  # asked a moment ago


def test_the_persons_own_zone_wins_over_the_browsers(client, alice):
    assert client.post("/accounts/login/", {"username": "alice", "password": "alice-password"}).status_code == 302
    client.cookies["questlog_tz"] = "America/Los_Angeles"
    response = client.post("/settings/", {"time_zone": "Asia/Tokyo"})
    assert response.status_code == 302
    assert PersonSettings.objects.get(user=alice).time_zone == "Asia/Tokyo"
    mission, approval = waiting_on_approval(alice)
    Approval.objects.filter(pk=approval.pk).update(respond_by=timezone.datetime(2030, 12, 3, 19, 3, tzinfo=timezone.UTC))
    assert "Dec 4, 2030, 04:03 JST" in client.get("/approvals/").content.decode()
    # A new session (logging in again) keeps the choice.
    fresh = Client()
    fresh.post("/accounts/login/", {"username": "alice", "password": "alice-password"})
    assert fresh.session[SESSION_TIME_ZONE] == "Asia/Tokyo"


def test_an_unknown_zone_is_a_form_error_and_a_bad_cookie_is_ignored(alice_client, alice):
    response = alice_client.post("/settings/", {"time_zone": "Mars/Olympus"})
    assert response.status_code == 422 and "is not a time zone we know" in response.content.decode()
    alice_client.cookies["questlog_tz"] = "../../etc/passwd"
    assert alice_client.get("/approvals/").status_code == 200


def test_relative_times_say_just_now_then_minutes_and_in_the_future():
    now = timezone.now()
    assert ">just now<" in when(now - timedelta(seconds=20), relative=True)
    assert ">5\xa0minutes ago<" in when(now - timedelta(minutes=5, seconds=3), relative=True)
    assert ">in 2\xa0hours<" in when(now + timedelta(hours=2, minutes=1), relative=True)


# --- 9. Deciding an approval of a cancelled quest ---------------------------------------------------


def test_deciding_an_approval_of_a_cancelled_quest_says_it_was_withdrawn(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    missions.mission_cancel(actor=person(alice), mission_id=mission.pk)
    with pytest.raises(Conflict) as refused:
        approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    assert refused.value.message == "This approval was withdrawn because the quest was cancelled. Nothing was decided."
    response = alice_client.post(f"/approvals/{approval.pk}/decide/", {"decision": "approve", "next": f"/missions/{mission.pk}/"})
    assert "withdrawn because the quest was cancelled" in response.content.decode()


def test_an_approval_that_ran_out_still_says_it_expired(alice):
    mission, approval = waiting_on_approval(alice)
    Approval.objects.filter(pk=approval.pk).update(respond_by=timezone.now() - timedelta(minutes=1))
    approvals.approvals_expire_due()
    with pytest.raises(Conflict) as refused:
        approvals.approval_decide(actor=person(alice), approval_id=approval.pk, decision="approve")
    assert refused.value.message == "This approval was already expired."
