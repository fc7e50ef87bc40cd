"""POST /runs/{id}/checkpoints, GET /missions/{id}/checkpoints and GET /checkpoints/{id}."""

import pytest

from checkpoints.models import Checkpoint
from quests.models import Mission

pytestmark = pytest.mark.django_db

CHECKPOINT_FIELDS = {"id", "mission_id", "run_id", "parent_id", "seq", "trigger", "hash", "verified", "size_bytes", "created_at"}


def save(agent, run: dict, agent_state: dict, **extra):
    response = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": agent_state, **extra})
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_an_agent_checkpoint_has_every_contract_field(agent, mission, run):
    response = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 1}, "note": "after research"})
    assert response.status_code == 201
    body = response.json()
    assert CHECKPOINT_FIELDS <= set(body)
    assert "agent_state" not in body
    assert body["trigger"] == "agent"
    assert body["mission_id"] == mission["id"]
    assert body["run_id"] == run["id"]
    assert body["verified"] is False
    assert len(body["hash"]) == 64
    assert body["size_bytes"] > 0
    assert agent.get(f"missions/{mission['id']}").json()["head_checkpoint_id"] == body["id"]


def test_checkpoints_chain_to_their_parent_with_rising_seq(agent, run):
    first = save(agent, run, {"step": 1})
    second = save(agent, run, {"step": 2})
    third = save(agent, run, {"step": 3})
    assert [first["seq"], second["seq"], third["seq"]] == [1, 2, 3]
    assert first["parent_id"] is None
    assert second["parent_id"] == first["id"]
    assert third["parent_id"] == second["id"]


def test_a_checkpoint_key_replays_the_original_also_after_the_run_ended(agent, run):
    first = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}, "key": "cp-1"})
    again = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}, "key": "cp-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    after = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}, "key": "cp-1"})
    assert after.status_code == 200
    assert after.json()["id"] == first.json()["id"]


def test_a_checkpoint_key_with_another_body_is_key_reuse(agent, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}, "key": "cp-1"})
    response = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 2}, "key": "cp-1"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_reuse"
    assert Checkpoint.objects.filter(trigger="agent").count() == 1


@pytest.mark.parametrize("agent_state", [[1, 2], "text", 3, None])
def test_agent_state_must_be_an_object(agent, run, agent_state):
    response = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": agent_state})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "agent_state"


def test_the_list_is_newest_first_without_agent_state(agent, mission, run):
    made = [save(agent, run, {"step": i}) for i in range(3)]
    response = agent.get(f"missions/{mission['id']}/checkpoints")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [c["id"] for c in items] == [c["id"] for c in reversed(made)]
    for item in items:
        assert CHECKPOINT_FIELDS <= set(item)
        assert "agent_state" not in item


def test_the_list_pages_with_limit_and_before_seq(agent, mission, run):
    for i in range(5):
        save(agent, run, {"step": i})
    page = agent.get(f"missions/{mission['id']}/checkpoints?limit=2").json()["items"]
    assert [c["seq"] for c in page] == [5, 4]
    page = agent.get(f"missions/{mission['id']}/checkpoints?limit=2&before_seq=4").json()["items"]
    assert [c["seq"] for c in page] == [3, 2]
    page = agent.get(f"missions/{mission['id']}/checkpoints?before_seq=2").json()["items"]
    assert [c["seq"] for c in page] == [1]
    assert agent.get(f"missions/{mission['id']}/checkpoints?before_seq=1").json()["items"] == []


@pytest.mark.parametrize("query", ["limit=abc", "before_seq=x"])
def test_a_bad_page_parameter_is_a_clear_error(agent, mission, query):
    response = agent.get(f"missions/{mission['id']}/checkpoints?{query}")
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == query.split("=")[0]


def test_an_empty_mission_lists_no_checkpoints(agent, mission):
    assert agent.get(f"missions/{mission['id']}/checkpoints").json() == {"items": []}


def test_one_checkpoint_answers_its_agent_state_and_full_state(agent, mission, run):
    agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})
    made = save(agent, run, {"step": 7, "notes": ["x"]})
    response = agent.get(f"checkpoints/{made['id']}")
    assert response.status_code == 200
    body = response.json()
    assert CHECKPOINT_FIELDS <= set(body)
    assert body["agent_state"] == {"step": 7, "notes": ["x"]}
    state = body["state"]
    assert state["mission"]["objective"] == mission["objective"]
    assert [c["text"] for c in state["constraints"]] == ["Never email the client before Friday"]
    assert [d["text"] for d in state["decisions"]] == ["Use Lakeside"]
    for section in ("open_questions", "blockers", "dependencies", "milestones", "approvals", "operations"):
        assert section in state


def test_another_users_checkpoint_is_not_found(bob_agent, agent, mission, run):
    made = save(agent, run, {"a": 1})
    assert bob_agent.get(f"checkpoints/{made['id']}").status_code == 404
    assert bob_agent.get(f"missions/{mission['id']}/checkpoints").status_code == 404


def test_an_approval_without_agent_state_carries_the_heads_agent_state(agent, mission, run):
    save(agent, run, {"draft": "v1"})
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "send", "payload": {}, "reason": "r"}).json()
    checkpoint = agent.get(f"checkpoints/{approval['checkpoint_id']}").json()
    assert checkpoint["trigger"] == "approval"
    assert checkpoint["agent_state"] == {"draft": "v1"}


def test_a_milestone_without_agent_state_carries_the_heads_agent_state(agent, run):
    save(agent, run, {"draft": "v2"})
    milestone = agent.post(f"runs/{run['id']}/milestones", {"kind": "draft_ready", "title": "Draft"}).json()
    checkpoint = agent.get(f"checkpoints/{milestone['checkpoint_id']}").json()
    assert checkpoint["trigger"] == "milestone"
    assert checkpoint["agent_state"] == {"draft": "v2"}


def test_a_pause_writes_a_stop_checkpoint_carrying_the_heads_agent_state(agent, person, mission, run):
    head = save(agent, run, {"draft": "v3"})
    person.post(f"missions/{mission['id']}/pause")
    stop = Mission.objects.get(pk=mission["id"]).head_checkpoint
    assert stop.trigger == "stop"
    assert stop.parent_id == head["id"]
    assert agent.get(f"checkpoints/{stop.pk}").json()["agent_state"] == {"draft": "v3"}


def test_checkpoints_are_never_rewritten_through_the_api(agent, run):
    made = save(agent, run, {"a": 1})
    for method in ("put", "patch", "delete"):
        response = getattr(agent.client, method)(f"/api/v1/checkpoints/{made['id']}", **agent.headers)
        assert response.status_code == 405, method
    assert agent.get(f"checkpoints/{made['id']}").json()["agent_state"] == {"a": 1}
