import pytest

pytestmark = pytest.mark.django_db


def test_a_mission_runs_end_to_end(agent, person, mission, run):
    r = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})
    assert r.status_code == 201, r.content
    r = agent.post(f"runs/{run['id']}/operations", {"key": "email-1", "kind": "email", "target": "client", "request": {"to": "x"}})
    assert r.status_code == 201, r.content
    op = r.json()
    assert agent.post(f"operations/{op['id']}/attempt").json()["status"] == "attempted"
    assert agent.post(f"operations/{op['id']}/complete", {"external_id": "m1", "external_status": "sent"}).json()["status"] == "completed"
    r = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1, "b": [1, 2]}})
    assert r.status_code == 201, r.content
    r = agent.post(f"runs/{run['id']}/approvals", {"action": "send the contract", "payload": {"x": 1}, "reason": "risky"})
    assert r.status_code == 201, r.content
    approval = r.json()
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "await_approval"
    assert agent.post(f"approvals/{approval['id']}/decision", {"decision": "approve"}).status_code == 403
    r = person.post(f"approvals/{approval['id']}/decision", {"decision": "approve"})
    assert r.status_code == 200, r.content
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "resume", bundle
    assert bundle["checkpoint"]["agent_state"] == {"a": 1, "b": [1, 2]}
    assert [c["text"] for c in bundle["constraints"]] == ["Never email the client before Friday"]
    assert bundle["operations"]["completed"][0]["key"] == "email-1"
