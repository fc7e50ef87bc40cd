"""The mission page /missions/<id>/ and its controls: pause, resume, cancel, restore, constraints."""

import pytest
from django.test import Client

from checkpoints.models import Checkpoint, Record
from quests.models import Constraint
from quests.services import missions, records
from tests.builders import (  # noqa: F401
    agent_for,
    fast_password_hashing,
    new_mission,
    opening_tag,
    person,
    running,
    verified_then_more_work,
    waiting_on_approval,
    waiting_on_gate,
)

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "mission-body"}


def mission_html(client, mission) -> str:
    response = client.get(f"/missions/{mission.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_shows_objective_constraints_approvals_milestones_and_the_sentence(alice_client, alice):
    mission, approval = waiting_on_approval(alice)
    body = mission_html(alice_client, mission)
    assert "Find and book a venue for 12 people." in body
    assert "Never email the client before Friday" in body
    assert "Deploying changes the public site." in body  # why it was requested
    assert "Waiting for your approval to deploy to production" in body
    for word in (">Approve<", ">Reject<", ">Edit and approve<", ">Pause<", ">Cancel quest<"):
        assert word in body
    assert "_retention_panel" not in body


def test_another_users_mission_is_404(client, alice, bob):
    mission = new_mission(alice)
    client.force_login(bob)
    assert client.get(f"/missions/{mission.pk}/").status_code == 404
    assert client.get("/missions/999999/").status_code == 404
    assert client.post(f"/missions/{mission.pk}/pause/").status_code == 404
    assert client.post(f"/missions/{mission.pk}/constraints/", {"text": "x"}).status_code == 404
    mission.refresh_from_db()
    assert mission.status == "ready" and mission.constraints.count() == 1


def test_forms_need_the_csrf_token(alice):
    mission = new_mission(alice)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(f"/missions/{mission.pk}/pause/").status_code == 403
    body = client.get(f"/missions/{mission.pk}/").content.decode()
    assert body.count('name="csrfmiddlewaretoken"') >= 3
    assert "X-CSRFToken" in body  # htmx requests carry it in a header


def test_pause_and_resume_as_plain_form_posts(alice_client, alice):
    mission, run = running(alice)
    response = alice_client.post(f"/missions/{mission.pk}/pause/", {"next": f"/missions/{mission.pk}/"})
    assert response.status_code == 302 and response["Location"] == f"/missions/{mission.pk}/"
    mission.refresh_from_db()
    run.refresh_from_db()
    assert mission.status == "paused" and run.stop_reason == "paused_by_user"
    body = mission_html(alice_client, mission)
    assert "Paused by you. Resume it when you are ready." in body and ">Resume<" in body and ">Pause<" not in body
    alice_client.post(f"/missions/{mission.pk}/unpause/", {"next": f"/missions/{mission.pk}/"})
    mission.refresh_from_db()
    assert mission.status == "ready"


def test_pause_with_htmx_swaps_the_mission_fragment_in_place(alice_client, alice):
    mission, _ = running(alice)
    response = alice_client.post(f"/missions/{mission.pk}/pause/", {"next": f"/missions/{mission.pk}/"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="mission-body"')
    assert "<html" not in body and 'hx-swap-oob="true"' in body
    assert 'data-status="paused"' in body


def test_a_refused_action_is_a_form_error_not_a_500(alice_client, alice):
    mission = new_mission(alice)
    missions.mission_cancel(actor=person(alice), mission_id=mission.pk)
    response = alice_client.post(f"/missions/{mission.pk}/pause/", {"next": f"/missions/{mission.pk}/"})
    assert response.status_code == 422
    assert "cannot be paused" in response.content.decode()
    response = alice_client.post(f"/missions/{mission.pk}/unpause/", {"next": f"/missions/{mission.pk}/"}, **HTMX)
    assert response.status_code == 422
    assert 'role="alert"' in response.content.decode()


def test_cancel_asks_for_confirmation_first(alice_client, alice):
    mission = new_mission(alice)
    confirm = alice_client.get(f"/missions/{mission.pk}/cancel/")
    assert confirm.status_code == 200
    assert "Yes, cancel quest" in confirm.content.decode()
    unconfirmed = alice_client.post(f"/missions/{mission.pk}/cancel/", {"next": f"/missions/{mission.pk}/"})
    assert unconfirmed.status_code == 200 and "Yes, cancel quest" in unconfirmed.content.decode()
    mission.refresh_from_db()
    assert mission.status == "ready"
    done = alice_client.post(f"/missions/{mission.pk}/cancel/", {"next": f"/missions/{mission.pk}/", "confirmed": "yes"})
    assert done.status_code == 302
    mission.refresh_from_db()
    assert mission.status == "cancelled"
    assert "Cancelled; nothing more will run." in mission_html(alice_client, mission)


def test_cancel_confirmation_comes_as_a_panel_for_htmx(alice_client, alice):
    mission = new_mission(alice)
    response = alice_client.get(f"/missions/{mission.pk}/cancel/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="cancel-confirm")
    body = response.content.decode()
    assert "<html" not in body and "Yes, cancel quest" in body and 'hx-target="#mission-body"' in body


def test_constraints_add_edit_and_retire_keep_history(alice_client, alice):
    mission = new_mission(alice)
    url = f"/missions/{mission.pk}/"
    alice_client.post(f"{url}constraints/", {"text": "  Budget is at most 4,000 EUR ", "next": url})
    added = Constraint.objects.get(mission=mission, text="Budget is at most 4,000 EUR")
    assert added.source == "user"
    alice_client.post(f"{url}constraints/{added.pk}/edit/", {"text": "Budget is at most 3,500 EUR", "next": url})
    alice_client.post(f"{url}constraints/{mission.constraints.first().pk}/retire/", {"next": url})
    body = mission_html(alice_client, mission)
    assert "<del>Budget is at most 4,000 EUR</del>" in body
    assert "<del>Never email the client before Friday</del>" in body
    assert "Budget is at most 3,500 EUR" in body
    assert Constraint.objects.filter(mission=mission).count() == 3


def test_an_empty_constraint_is_a_form_error(alice_client, alice):
    mission = new_mission(alice)
    response = alice_client.post(f"/missions/{mission.pk}/constraints/", {"text": "   ", "next": f"/missions/{mission.pk}/"})
    assert response.status_code == 422
    assert "Write the constraint first." in response.content.decode()
    assert mission.constraints.count() == 1


def test_another_missions_constraint_is_404(alice_client, alice):
    mine, other = new_mission(alice), new_mission(alice, "Other")
    constraint = other.constraints.first()
    assert alice_client.post(f"/missions/{mine.pk}/constraints/{constraint.pk}/retire/").status_code == 404


def test_restore_confirmation_says_what_is_kept_and_what_is_set_aside(alice_client, alice):
    built = verified_then_more_work(alice)
    mission = built.mission
    body = mission_html(alice_client, mission)
    assert f'<option value="{built.verified_checkpoint_id}" selected>' in body  # the last verified one is offered
    confirm = alice_client.get(f"/missions/{mission.pk}/restore/?checkpoint={built.verified_checkpoint_id}").content.decode()
    assert "Kept" in confirm and "Set aside" in confirm
    assert "active constraint" in confirm and "operation ledger" in confirm
    assert "Yes, restore" in confirm


def test_restore_opens_a_branch_and_keeps_constraints_and_the_ledger(alice_client, alice):
    built = verified_then_more_work(alice)
    mission = built.mission
    url = f"/missions/{mission.pk}/"
    response = alice_client.post(f"{url}restore/", {"checkpoint": built.verified_checkpoint_id, "confirmed": "yes", "next": url}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    mission.refresh_from_db()
    assert mission.status == "ready"
    assert Checkpoint.objects.get(pk=mission.head_checkpoint_id).parent_id == built.verified_checkpoint_id
    assert Record.objects.get(pk=built.later_decision_id).abandoned
    assert 'data-lanes="2"' in body and "node abandoned" in body
    assert "PNR-7QX2" in body  # the ledger is never rolled back
    assert "Never email the client before Friday" in body


def test_restore_of_a_running_mission_is_a_form_error(alice_client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    checkpoint, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={})
    url = f"/missions/{mission.pk}/"
    response = alice_client.post(f"{url}restore/", {"checkpoint": checkpoint.pk, "confirmed": "yes", "next": url})
    assert response.status_code == 422
    assert "pause the mission before restoring it" in response.content.decode()


def test_restore_to_another_missions_checkpoint_is_refused(alice_client, alice):
    built = verified_then_more_work(alice)
    other = verified_then_more_work(alice, "Other")
    url = f"/missions/{built.mission.pk}/"
    response = alice_client.post(f"{url}restore/", {"checkpoint": other.verified_checkpoint_id, "confirmed": "yes", "next": url})
    assert response.status_code == 422
    built.mission.refresh_from_db()
    assert built.mission.status == "blocked"
    assert alice_client.get(f"{url}restore/?checkpoint=abc").status_code == 422


def test_it_polls_while_running_and_answers_204_when_nothing_changed(alice_client, alice):
    from quests.selectors.board import mission_version

    mission, _ = running(alice)
    body = mission_html(alice_client, mission)
    assert 'hx-trigger="every 3s"' in opening_tag(body, "mission-body")
    mission.refresh_from_db()
    poll = alice_client.get(f"/missions/{mission.pk}/?since={mission_version(mission)}", **HTMX)
    assert poll.status_code == 204
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    poll = alice_client.get(f"/missions/{mission.pk}/?since={mission_version(mission)}", **HTMX)
    assert poll.status_code == 200 and 'hx-trigger="every' not in opening_tag(poll.content.decode(), "mission-body")


def test_a_mission_that_is_not_running_does_not_poll(alice_client, alice):
    mission, _ = waiting_on_gate(alice)
    assert 'hx-trigger="every' not in opening_tag(mission_html(alice_client, mission), "mission-body")


def test_the_timeline_shows_runs_with_stop_reasons_and_checkpoints(alice_client, alice):
    mission, _ = waiting_on_gate(alice)
    body = mission_html(alice_client, mission)
    assert "Run 1" in body and "Waiting for your review of “Venues shortlisted”" in body
    assert "milestone claimed" in body
    assert "<svg" in body and 'class="tree"' in body


def test_the_page_shows_the_operation_ledger_and_durable_records(alice_client, alice):
    built = verified_then_more_work(alice)
    body = mission_html(alice_client, built.mission)
    for text in ("flight-1", "flight.book", "TP1351", "Completed", "1 / 3", "PNR-7QX2", "312 EUR", "Switch to Hotel Miradouro."):
        assert text in body
    assert "Blocked: Hotel site down" in body


def test_a_mission_an_agent_may_pick_up_polls_slowly_and_one_only_a_person_moves_does_not(alice_client, alice):
    from quests.services.machine import MOVES_UNATTENDED

    # Ready and blocked missions change when an agent starts a run; waiting, paused, failed and
    # finished ones only when a person acts (and the page answering that person swaps itself).
    assert MOVES_UNATTENDED == {"ready", "running", "blocked"}
    mission = new_mission(alice)
    assert mission.status == "ready"
    tag = opening_tag(mission_html(alice_client, mission), "mission-body")
    assert 'hx-trigger="every 15s"' in tag and "?since=" in tag
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    assert "hx-trigger" not in opening_tag(mission_html(alice_client, mission), "mission-body")


def test_the_mission_body_says_its_status_and_sentence_for_the_live_region(alice_client, alice):
    mission, _ = running(alice)
    missions.mission_pause(actor=person(alice), mission_id=mission.pk)
    tag = opening_tag(mission_html(alice_client, mission), "mission-body")
    assert 'data-announce="Paused. Paused by you. Resume it when you are ready."' in tag
