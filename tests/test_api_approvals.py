"""POST /runs/{id}/approvals and the people-only POST /approvals/{id}/decision."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from quests.models import Approval, Mission, Run
from quests.services.approvals import approvals_expire_due

pytestmark = pytest.mark.django_db

APPROVAL_FIELDS = {"id", "action", "payload", "reason", "status", "decided_payload", "note", "checkpoint_id", "expires_at"}
REQUEST = {"action": "send the contract to the venue", "payload": {"amount": 4200}, "reason": "It commits money."}


def ask(agent, run: dict, **extra) -> dict:
    response = agent.post(f"runs/{run['id']}/approvals", {**REQUEST, **extra})
    assert response.status_code in (200, 201), response.content
    return response.json()


def decide(person, approval: dict, decision: str, **extra):
    return person.post(f"approvals/{approval['id']}/decision", {"decision": decision, **extra})


def test_a_request_is_pending_and_ends_the_run_waiting_for_approval(agent, mission, run):
    response = agent.post(f"runs/{run['id']}/approvals", {**REQUEST, "agent_state": {"step": "contract"}})
    assert response.status_code == 201
    body = response.json()
    assert APPROVAL_FIELDS <= set(body)
    assert (body["status"], body["payload"], body["reason"]) == ("pending", {"amount": 4200}, "It commits money.")
    ended = Run.objects.get(pk=run["id"])
    assert (ended.ended_at is not None, ended.stop_reason) == (True, "waiting_for_approval")
    m = agent.get(f"missions/{mission['id']}").json()
    assert (m["status"], m["stop_reason"]) == ("waiting_for_approval", "waiting_for_approval")
    checkpoint = agent.get(f"checkpoints/{body['checkpoint_id']}").json()
    assert checkpoint["trigger"] == "approval"
    assert checkpoint["agent_state"] == {"step": "contract"}
    assert m["head_checkpoint_id"] == body["checkpoint_id"]


def test_the_approval_checkpoint_is_the_only_one_the_request_writes(agent, mission, run):
    ask(agent, run)
    triggers = [c["trigger"] for c in agent.get(f"missions/{mission['id']}/checkpoints").json()["items"]]
    assert triggers == ["approval"]


def test_the_bundle_waits_for_the_approval_and_says_why(agent, mission, run):
    ask(agent, run)
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "await_approval"
    assert "send the contract to the venue" in bundle["message"]
    assert [(a["action"], a["reason"], a["status"]) for a in bundle["approvals"]] == [("send the contract to the venue", "It commits money.", "pending")]


def test_expires_at_is_kept(agent, run):
    when = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    body = ask(agent, run, expires_at=when.isoformat())
    assert parse_datetime(body["expires_at"]) == when


def test_an_approval_key_replays_the_original_after_the_run_it_ended(agent, run):
    first = agent.post(f"runs/{run['id']}/approvals", {**REQUEST, "key": "ask-1"})
    again = agent.post(f"runs/{run['id']}/approvals", {**REQUEST, "key": "ask-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = agent.post(f"runs/{run['id']}/approvals", {**REQUEST, "reason": "Other", "key": "ask-1"})
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "key_reuse"
    assert Approval.objects.count() == 1


def test_approve_sets_the_decided_payload_and_the_mission_is_ready(agent, person, mission, run):
    approval = ask(agent, run)
    response = decide(person, approval, "approve", note="Go ahead")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decided_payload"], body["note"]) == ("approved", {"amount": 4200}, "Go ahead")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["mission"]["status"] == "ready"
    assert bundle["next_action"] == "resume"
    assert agent.post(f"missions/{mission['id']}/runs").status_code == 201


def test_reject_keeps_the_note_and_the_mission_is_ready(agent, person, mission, run):
    approval = ask(agent, run)
    body = decide(person, approval, "reject", note="Too expensive").json()
    assert (body["status"], body["decided_payload"], body["note"]) == ("rejected", None, "Too expensive")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["mission"]["status"] == "ready"
    assert bundle["approvals"][0]["note"] == "Too expensive"


def test_edit_approves_a_changed_payload(agent, person, mission, run):
    approval = ask(agent, run)
    body = decide(person, approval, "edit", payload={"amount": 3900}).json()
    assert (body["status"], body["payload"], body["decided_payload"]) == ("edited", {"amount": 4200}, {"amount": 3900})
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "ready"


def test_edit_needs_a_payload(agent, person, run):
    approval = ask(agent, run)
    response = decide(person, approval, "edit")
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "payload"
    assert Approval.objects.get(pk=approval["id"]).status == "pending"


def test_an_unknown_decision_is_refused(agent, person, run):
    approval = ask(agent, run)
    response = decide(person, approval, "maybe")
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "decision"


@pytest.mark.parametrize("first, second", [("approve", "approve"), ("approve", "reject"), ("reject", "edit")])
def test_deciding_twice_is_invalid_transition(agent, person, run, first, second):
    approval = ask(agent, run)
    assert decide(person, approval, first, payload={"x": 1}).status_code == 200
    response = decide(person, approval, second, payload={"x": 1})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_an_agent_can_never_decide_an_approval(agent, run):
    approval = ask(agent, run)
    response = decide(agent, approval, "approve")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert Approval.objects.get(pk=approval["id"]).status == "pending"


def test_another_person_cannot_see_the_approval(agent, bob_person, run):
    approval = ask(agent, run)
    assert decide(bob_person, approval, "approve").status_code == 404
    assert Approval.objects.get(pk=approval["id"]).status == "pending"


def test_the_mission_is_ready_only_when_nothing_is_pending(agent, person, mission, run):
    approval = ask(agent, run)
    person.post(f"missions/{mission['id']}/pause")
    person.post(f"missions/{mission['id']}/unpause")
    assert Mission.objects.get(pk=mission["id"]).status == "waiting_for_approval"
    Approval.objects.create(mission_id=mission["id"], action="second", payload={}, reason="also")
    decide(person, approval, "approve")
    assert Mission.objects.get(pk=mission["id"]).status == "waiting_for_approval"
    decide(person, {"id": Approval.objects.get(action="second").pk}, "reject")
    assert Mission.objects.get(pk=mission["id"]).status == "ready"


def test_an_unreviewed_ordinary_milestone_does_not_hold_the_mission(agent, person, mission, run):
    agent.post(f"runs/{run['id']}/milestones", {"kind": "research_complete", "title": "Research", "gate": False})
    approval = ask(agent, run)
    decide(person, approval, "approve")
    assert Mission.objects.get(pk=mission["id"]).status == "ready"


def test_a_decision_while_paused_leaves_it_paused_and_unpause_makes_it_ready(agent, person, mission, run):
    approval = ask(agent, run)
    person.post(f"missions/{mission['id']}/pause")
    decide(person, approval, "approve")
    assert Mission.objects.get(pk=mission["id"]).status == "paused"
    person.post(f"missions/{mission['id']}/unpause")
    assert Mission.objects.get(pk=mission["id"]).status == "ready"


def test_an_expired_approval_makes_the_mission_ready(agent, mission, run):
    approval = ask(agent, run, expires_at=(timezone.now() + timedelta(minutes=5)).isoformat())
    assert approvals_expire_due(timezone.now()) == 0
    assert approvals_expire_due(timezone.now() + timedelta(minutes=6)) == 1
    assert Approval.objects.get(pk=approval["id"]).status == "expired"
    assert Mission.objects.get(pk=mission["id"]).status == "ready"
