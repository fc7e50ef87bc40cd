"""A person's standing decision: `always` on POST /approvals/{id}/decision answers every request of
the same action in the mission (the pending ones and those asked later) until it is revoked with
POST /missions/{id}/standing-decisions/{id}/revoke; the bundle carries them for adapters."""

import pytest

from quests.models import Approval, AuditEvent, StandingDecision

pytestmark = pytest.mark.django_db

EMAIL = {"action": "send_email", "payload": {"to": "team@example.com"}, "reason": "Invite the team."}
ROOM = {"action": "book_room", "payload": {"room": "lodge"}, "reason": "It costs a deposit."}


def start(agent, mission) -> dict:
    response = agent.post(f"missions/{mission['id']}/runs", {"agent": "test"})
    assert response.status_code == 201, response.content
    return response.json()["run"]


def ask(agent, run: dict, *items: dict) -> list[dict]:
    response = agent.post(f"runs/{run['id']}/approvals/batch", {"items": list(items)})
    assert response.status_code == 201, response.content
    return response.json()["items"]


def decide(person, approval: dict, decision: str, **extra):
    return person.post(f"approvals/{approval['id']}/decision", {"decision": decision, **extra})


def bundle(agent, mission) -> dict:
    return agent.get(f"missions/{mission['id']}/resume").json()


def test_always_decides_the_pending_requests_of_the_same_action_and_not_the_others(agent, person, mission, run):
    first, room, second = ask(agent, run, EMAIL, ROOM, {**EMAIL, "payload": {"to": "boss@example.com"}})
    decided = decide(person, first, "approve", always=True)
    assert decided.status_code == 200, decided.content
    assert (decided.json()["status"], decided.json()["always"]) == ("approved", True)
    approvals = {a["id"]: a for a in bundle(agent, mission)["approvals"]}
    assert (approvals[second["id"]]["status"], approvals[second["id"]]["always"]) == ("approved", True)
    assert approvals[second["id"]]["decided_payload"] == {"to": "boss@example.com"}
    assert approvals[room["id"]]["status"] == "pending"
    [standing] = bundle(agent, mission)["standing_decisions"]
    assert (standing["action"], standing["decision"], standing["revoked_at"]) == ("send_email", "approve", None)
    assert Approval.objects.get(pk=second["id"]).decided_by.username == "alice"


def test_a_request_a_standing_decision_covers_is_decided_when_asked_and_the_mission_is_ready(agent, person, mission, run):
    [first] = ask(agent, run, EMAIL)
    decide(person, first, "reject", note="No email from this quest.", always=True)
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "ready"
    [later] = ask(agent, start(agent, mission), {**EMAIL, "payload": {"to": "venue@example.com"}})
    assert (later["status"], later["note"], later["always"]) == ("rejected", "No email from this quest.", True)
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "ready"
    assert bundle(agent, mission)["next_action"] != "await_approval"
    assert AuditEvent.objects.filter(entity="approval", entity_id=later["id"], action="reject").exists()


def test_a_revoked_standing_decision_asks_again_and_stays_in_the_bundle_as_revoked(agent, person, mission, run):
    [first] = ask(agent, run, EMAIL)
    decide(person, first, "approve", always=True)
    standing = StandingDecision.objects.get()
    revoked = person.post(f"missions/{mission['id']}/standing-decisions/{standing.pk}/revoke")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["revoked_at"] is not None
    [later] = ask(agent, start(agent, mission), EMAIL)
    assert (later["status"], later["always"]) == ("pending", False)
    assert [s["revoked_at"] is not None for s in bundle(agent, mission)["standing_decisions"]] == [True]
    again = person.post(f"missions/{mission['id']}/standing-decisions/{standing.pk}/revoke")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"


def test_an_edit_cannot_stand_for_every_call(agent, person, mission, run):
    [first] = ask(agent, run, EMAIL)
    response = decide(person, first, "edit", payload={"to": "lead@example.com"}, always=True)
    assert response.status_code == 422 and response.json()["error"]["field"] == "always"
    assert Approval.objects.get(pk=first["id"]).status == "pending" and not StandingDecision.objects.exists()


def test_an_agent_cannot_revoke_and_another_person_cannot_see_it(agent, person, bob_person, mission, run):
    [first] = ask(agent, run, EMAIL)
    decide(person, first, "approve", always=True)
    standing = StandingDecision.objects.get()
    path = f"missions/{mission['id']}/standing-decisions/{standing.pk}/revoke"
    assert agent.post(path).status_code == 403
    assert bob_person.post(path).status_code == 404
    assert person.post(f"missions/{mission['id'] + 1000}/standing-decisions/{standing.pk}/revoke").status_code == 404
    assert StandingDecision.objects.get().revoked_at is None
