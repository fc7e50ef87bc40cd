"""Memory proposals (agents), decisions and forgetting (people), GET /memory."""

import pytest

from quests.models import MemoryItem, MemoryProposal

pytestmark = pytest.mark.django_db

PROPOSAL = {"name": "seating", "value": "Prefers round tables", "reason": "Said so twice"}


def propose(agent, run: dict, **extra) -> dict:
    response = agent.post(f"runs/{run['id']}/memory-proposals", {**PROPOSAL, **extra})
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_a_proposal_is_pending_and_no_memory_exists_yet(agent, mission, run):
    response = agent.post(f"runs/{run['id']}/memory-proposals", PROPOSAL)
    assert response.status_code == 201
    assert response.json()["status"] == "pending"
    assert agent.get("memory").json() == {"items": []}
    assert agent.get(f"missions/{mission['id']}/resume").json()["memory"] == []
    assert not MemoryItem.objects.exists()


def test_approving_a_proposal_creates_the_memory_item(agent, person, mission, run):
    proposal = propose(agent, run)
    response = person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    items = agent.get("memory").json()["items"]
    assert len(items) == 1
    item = items[0]
    assert {"id", "name", "value", "source_mission_id", "approved_at", "expires_at"} <= set(item)
    assert (item["name"], item["value"], item["source_mission_id"]) == ("seating", "Prefers round tables", mission["id"])
    assert item["approved_at"] is not None
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["memory"] == [{"name": "seating", "value": "Prefers round tables"}]


def test_declining_a_proposal_creates_nothing(agent, person, run):
    proposal = propose(agent, run)
    assert person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "decline"}).json()["status"] == "declined"
    assert agent.get("memory").json() == {"items": []}


def test_deciding_twice_is_invalid_transition(agent, person, run):
    proposal = propose(agent, run)
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    response = person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "decline"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"
    assert MemoryItem.objects.count() == 1


def test_an_unknown_decision_is_refused(agent, person, run):
    proposal = propose(agent, run)
    response = person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "maybe"})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "decision"


def test_an_agent_cannot_decide_its_own_proposal(agent, run):
    proposal = propose(agent, run)
    assert agent.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"}).status_code == 403
    assert MemoryProposal.objects.get(pk=proposal["id"]).status == "pending"


def test_a_person_forgets_a_memory_item(agent, person, run):
    proposal = propose(agent, run)
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    item = agent.get("memory").json()["items"][0]
    assert agent.delete(f"memory/{item['id']}").status_code == 403
    response = person.delete(f"memory/{item['id']}")
    assert response.status_code == 200
    assert agent.get("memory").json() == {"items": []}
    assert person.delete(f"memory/{item['id']}").status_code == 404


def test_memory_belongs_to_its_owner(agent, person, bob_agent, bob_person, run):
    proposal = propose(agent, run)
    assert bob_person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"}).status_code == 404
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    item = MemoryItem.objects.get()
    assert bob_agent.get("memory").json() == {"items": []}
    assert bob_person.delete(f"memory/{item.pk}").status_code == 404
    assert MemoryItem.objects.filter(pk=item.pk).exists()


def test_a_proposal_from_an_ended_run_is_run_ended_unless_it_replays_a_key(agent, run):
    first = propose(agent, run, key="mem-1")
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    again = agent.post(f"runs/{run['id']}/memory-proposals", {**PROPOSAL, "key": "mem-1"})
    assert (again.status_code, again.json()["id"]) == (200, first["id"])
    response = agent.post(f"runs/{run['id']}/memory-proposals", {**PROPOSAL, "name": "other"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_ended"


def test_a_proposal_key_with_another_body_is_key_reuse(agent, run):
    propose(agent, run, key="mem-1")
    response = agent.post(f"runs/{run['id']}/memory-proposals", {**PROPOSAL, "value": "Square tables", "key": "mem-1"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_reuse"


def test_memory_carries_across_missions(agent, person, run):
    proposal = propose(agent, run)
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    other = agent.post("missions", {"title": "Next event", "objective": "O"}).json()
    assert agent.get(f"missions/{other['id']}/resume").json()["memory"] == [{"name": "seating", "value": "Prefers round tables"}]
