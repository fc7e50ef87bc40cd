"""POST/GET /missions, constraints, run starts and the resume endpoint (API.md: Endpoints)."""

import pytest

from quests.models import Constraint, Mission

pytestmark = pytest.mark.django_db

MISSION_FIELDS = {
    "id",
    "title",
    "objective",
    "status",
    "stop_reason",
    "stop_detail",
    "retry_at",
    "created_at",
    "ended_at",
    "progress",
    "head_checkpoint_id",
    "retention_approved_at",
    "expires_at",
    "purged_at",
}
RUN_FIELDS = {"id", "mission_id", "number", "agent", "started_at", "heartbeat_at", "ended_at", "stop_reason"}


def new_mission(api, title: str = "Plan the trip", **extra) -> dict:
    response = api.post("missions", {"title": title, "objective": "Somewhere warm.", **extra})
    assert response.status_code == 201, response.content
    return response.json()


def test_it_creates_a_mission_with_every_contract_field(agent):
    response = agent.post(
        "missions",
        {
            "title": "Book the offsite",
            "objective": "Find a venue.",
            "constraints": ["No venues over budget"],
            "planned_milestones": [{"kind": "research_complete", "title": "Research"}],
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert MISSION_FIELDS <= set(body)
    assert body["status"] == "ready"
    assert body["stop_reason"] is None
    assert body["retry_at"] is None
    assert body["ended_at"] is None
    assert body["head_checkpoint_id"] is None
    assert body["progress"] == {"approved": 0, "planned": 1}
    mission = Mission.objects.get(pk=body["id"])
    assert [(c.text, c.source) for c in mission.constraints.all()] == [("No venues over budget", "user")]


def test_it_refuses_an_unknown_planned_milestone_kind(agent):
    response = agent.post("missions", {"title": "T", "objective": "O", "planned_milestones": [{"kind": "world_peace", "title": "x"}]})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"].startswith("planned_milestones")


def test_it_refuses_a_mission_without_a_title(agent):
    response = agent.post("missions", {"objective": "O"})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "title"


def test_the_same_key_and_body_replays_the_original_mission(agent):
    body = {"title": "T", "objective": "O", "key": "create-1"}
    first = agent.post("missions", body)
    again = agent.post("missions", body)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert Mission.objects.count() == 1


def test_the_same_key_with_another_body_is_key_reuse(agent):
    agent.post("missions", {"title": "T", "objective": "O", "key": "create-1"})
    response = agent.post("missions", {"title": "Other", "objective": "O", "key": "create-1"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_reuse"
    assert Mission.objects.count() == 1


def test_a_key_is_per_user(agent, bob_agent):
    mine = agent.post("missions", {"title": "T", "objective": "O", "key": "k"}).json()
    theirs = bob_agent.post("missions", {"title": "T", "objective": "O", "key": "k"})
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine["id"]


def test_without_a_key_each_post_creates_a_mission(agent):
    agent.post("missions", {"title": "T", "objective": "O"})
    agent.post("missions", {"title": "T", "objective": "O"})
    assert Mission.objects.count() == 2


def test_it_lists_only_the_callers_missions_newest_first(agent, bob_agent):
    first = new_mission(agent, "first")
    second = new_mission(agent, "second")
    new_mission(bob_agent, "bob's")
    response = agent.get("missions")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["items"]] == [second["id"], first["id"]]


def test_it_shows_a_mission(agent, mission):
    response = agent.get(f"missions/{mission['id']}")
    assert response.status_code == 200
    assert response.json()["id"] == mission["id"]
    assert MISSION_FIELDS <= set(response.json())


def test_another_users_mission_is_not_found(bob_agent, mission):
    response = bob_agent.get(f"missions/{mission['id']}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_agent_adds_a_constraint_marked_as_its_own(agent, mission):
    response = agent.post(f"missions/{mission['id']}/constraints", {"text": "Stay under 5k"})
    assert response.status_code == 201
    body = response.json()
    assert {"id", "text", "source", "created_at", "retired_at"} <= set(body)
    assert body["source"] == "agent"
    assert body["retired_at"] is None


def test_a_person_adds_a_user_constraint(person, mission):
    response = person.post(f"missions/{mission['id']}/constraints", {"text": "Stay under 5k"})
    assert response.status_code == 201
    assert response.json()["source"] == "user"


def test_a_constraint_key_replays_and_refuses_reuse(agent, mission):
    path = f"missions/{mission['id']}/constraints"
    first = agent.post(path, {"text": "A", "key": "c1"})
    again = agent.post(path, {"text": "A", "key": "c1"})
    other = agent.post(path, {"text": "B", "key": "c1"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["error"]["code"] == "key_reuse"
    assert Constraint.objects.filter(mission_id=mission["id"]).count() == 2


def test_it_refuses_an_empty_constraint(agent, mission):
    response = agent.post(f"missions/{mission['id']}/constraints", {"text": "  "})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "text"


def test_it_starts_a_run_with_its_resume_bundle(agent, mission):
    response = agent.post(f"missions/{mission['id']}/runs", {"agent": "claude"})
    assert response.status_code == 201
    body = response.json()
    assert RUN_FIELDS <= set(body["run"])
    assert body["run"]["number"] == 1
    assert body["run"]["agent"] == "claude"
    assert body["run"]["mission_id"] == mission["id"]
    assert body["run"]["ended_at"] is None
    assert body["resume"]["mission"]["status"] == "running"
    assert body["resume"]["next_action"] == "resume"
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "running"


def test_it_starts_a_run_without_a_body(agent, mission):
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.status_code == 201, response.content
    assert response.json()["run"]["agent"] == ""


def test_run_numbers_count_up(agent, mission, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "API down"})
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.json()["run"]["number"] == 2


def test_a_second_start_is_run_active_while_the_run_is_fresh(agent, mission, run):
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_active"


def test_a_run_start_key_replays_the_original_run_even_after_it_ended(agent, mission):
    path = f"missions/{mission['id']}/runs"
    first = agent.post(path, {"agent": "a", "key": "start-1"})
    run_id = first.json()["run"]["id"]
    agent.post(f"runs/{run_id}/stop", {"reason": "blocked_external", "detail": "down"})
    again = agent.post(path, {"agent": "a", "key": "start-1"})
    assert again.status_code == 200
    assert again.json()["run"]["id"] == run_id
    other = agent.post(path, {"agent": "b", "key": "start-1"})
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "key_reuse"


def _waiting_for_approval(agent, person, run):
    agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {}, "reason": "money"})


def _paused(agent, person, run):
    person.post(f"missions/{run['mission_id']}/pause")


def _failed(agent, person, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "failed_retry_budget", "detail": "gave up"})


def _cancelled(agent, person, run):
    person.post(f"missions/{run['mission_id']}/cancel")


def _completed(agent, person, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})


@pytest.mark.parametrize(
    "status, get_there",
    [
        ("waiting_for_approval", _waiting_for_approval),
        ("paused", _paused),
        ("failed", _failed),
        ("cancelled", _cancelled),
        ("completed", _completed),
    ],
)
def test_a_run_cannot_start_when_the_mission_is_not_startable(agent, person, mission, run, status, get_there):
    get_there(agent, person, run)
    assert Mission.objects.get(pk=mission["id"]).status == status
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "mission_not_startable"


def test_a_blocked_mission_is_startable(agent, mission, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "API down"})
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.status_code == 201


def test_another_users_mission_cannot_be_started(bob_agent, mission):
    assert bob_agent.post(f"missions/{mission['id']}/runs").status_code == 404


def test_it_answers_the_resume_bundle(agent, mission):
    response = agent.get(f"missions/{mission['id']}/resume")
    assert response.status_code == 200
    body = response.json()
    assert body["mission"]["id"] == mission["id"]
    assert body["next_action"] == "resume"
    assert body["checkpoint"] is None
    assert [c["text"] for c in body["constraints"]] == ["Never email the client before Friday"]


def test_progress_counts_planned_plus_unplanned_claims_and_only_approved_milestones(agent, person, mission, run):
    assert mission["progress"] == {"approved": 0, "planned": 2}

    def claim(kind):
        return agent.post(f"runs/{run['id']}/milestones", {"kind": kind, "title": kind, "summary": "s"}).json()

    research = claim("research_complete")
    custom = claim("custom")
    claim("custom")
    progress = agent.get(f"missions/{mission['id']}").json()["progress"]
    # Two planned entries plus each claimed milestone whose kind matches no planned entry.
    assert progress == {"approved": 0, "planned": 4}
    person.post(f"milestones/{research['id']}/review", {"action": "approve"})
    person.post(f"milestones/{custom['id']}/review", {"action": "correct", "note": "Not quite"})
    progress = agent.get(f"missions/{mission['id']}").json()["progress"]
    assert progress == {"approved": 1, "planned": 4}
    listed = agent.get("missions").json()["items"][0]["progress"]
    assert listed == progress
