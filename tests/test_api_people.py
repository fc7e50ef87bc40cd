"""People-only mission controls: pause, unpause, cancel, restore, retire a constraint."""

import pytest

from checkpoints.models import Checkpoint
from quests.models import Approval, Constraint, Milestone, Mission, Run
from quests.selectors.people import inbox_approvals, inbox_milestones

pytestmark = pytest.mark.django_db


def status(mission: dict) -> str:
    return Mission.objects.get(pk=mission["id"]).status


def test_pause_ends_the_active_run_paused_by_user(agent, person, mission, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 2}})
    response = person.post(f"missions/{mission['id']}/pause")
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["status"], body["stop_reason"]) == (mission["id"], "paused", "paused_by_user")
    assert Run.objects.get(pk=run["id"]).stop_reason == "paused_by_user"
    head = Mission.objects.get(pk=mission["id"]).head_checkpoint
    assert head.trigger == "stop"
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "await_user"
    assert bundle["checkpoint"]["agent_state"] == {"step": 2}


def test_pause_without_a_run_pauses_the_mission(person, mission):
    body = person.post(f"missions/{mission['id']}/pause").json()
    assert (body["status"], body["stop_reason"]) == ("paused", "paused_by_user")


def test_pausing_twice_is_invalid_transition(person, mission):
    person.post(f"missions/{mission['id']}/pause")
    response = person.post(f"missions/{mission['id']}/pause")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_unpause_makes_the_mission_ready(person, mission):
    person.post(f"missions/{mission['id']}/pause")
    response = person.post(f"missions/{mission['id']}/unpause")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"


def test_unpause_on_a_failed_mission_makes_it_ready(agent, person, mission, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "failed_retry_budget"})
    assert person.post(f"missions/{mission['id']}/unpause").json()["status"] == "ready"
    assert agent.post(f"missions/{mission['id']}/runs").status_code == 201


def test_unpause_with_something_pending_waits_for_approval(agent, person, mission, run):
    agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {}, "reason": "money"})
    person.post(f"missions/{mission['id']}/pause")
    assert person.post(f"missions/{mission['id']}/unpause").json()["status"] == "waiting_for_approval"


@pytest.mark.parametrize("setup", ["ready", "running"])
def test_unpause_is_only_for_paused_or_failed_missions(agent, person, mission, setup):
    if setup == "running":
        agent.post(f"missions/{mission['id']}/runs")
    response = person.post(f"missions/{mission['id']}/unpause")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_cancel_is_terminal_and_ends_the_run(agent, person, mission, run):
    response = person.post(f"missions/{mission['id']}/cancel")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"]) == ("cancelled", "cancelled_by_user")
    assert body["ended_at"] is not None
    assert Run.objects.get(pk=run["id"]).stop_reason == "cancelled_by_user"
    assert Mission.objects.get(pk=mission["id"]).head_checkpoint.trigger == "stop"
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "none"
    for action in ("pause", "unpause", "cancel"):
        assert person.post(f"missions/{mission['id']}/{action}").status_code == 409, action


def test_cancel_without_a_run_writes_a_stop_checkpoint(person, mission):
    person.post(f"missions/{mission['id']}/cancel")
    assert Checkpoint.objects.filter(mission_id=mission["id"], trigger="stop").count() == 1


def test_cancel_withdraws_what_is_pending(agent, person, alice, mission, run):
    milestone = agent.post(f"runs/{run['id']}/milestones", {"kind": "custom", "title": "Side quest"}).json()
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {}, "reason": "money"}).json()
    person.post(f"missions/{mission['id']}/cancel")
    assert Approval.objects.get(pk=approval["id"]).status == "expired"
    stays = Milestone.objects.get(pk=milestone["id"])
    assert stays.review_status == "pending_review"
    assert not inbox_milestones(alice).exists()
    assert not inbox_approvals(alice).exists()


def test_completion_withdraws_pending_milestones(agent, alice, mission, run):
    agent.post(f"runs/{run['id']}/milestones", {"kind": "custom", "title": "Side quest"})
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    assert Milestone.objects.get().review_status == "pending_review"
    assert not inbox_milestones(alice).exists()


def test_a_completed_mission_cannot_be_cancelled(agent, person, mission, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    response = person.post(f"missions/{mission['id']}/cancel")
    assert response.status_code == 409
    assert status(mission) == "completed"


def test_restore_opens_a_new_branch_from_the_chosen_checkpoint(agent, person, mission, run):
    chosen = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 1}}).json()
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 2}})
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    response = person.post(f"missions/{mission['id']}/restore", {"checkpoint_id": chosen["id"]})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    assert (body["checkpoint"]["trigger"], body["checkpoint"]["parent_id"]) == ("restore", chosen["id"])
    assert body["head_checkpoint_id"] == body["checkpoint"]["id"]
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["checkpoint"]["agent_state"] == {"step": 1}


def test_restore_is_refused_while_a_run_is_active(agent, person, mission, run):
    chosen = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 1}}).json()
    response = person.post(f"missions/{mission['id']}/restore", {"checkpoint_id": chosen["id"]})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_restore_needs_a_checkpoint_of_this_mission(agent, person, bob_agent, mission):
    theirs = bob_agent.post("missions", {"title": "B", "objective": "O"}).json()
    bob_run = bob_agent.post(f"missions/{theirs['id']}/runs").json()["run"]
    cp = bob_agent.post(f"runs/{bob_run['id']}/checkpoints", {"agent_state": {}}).json()
    response = person.post(f"missions/{mission['id']}/restore", {"checkpoint_id": cp["id"]})
    assert response.status_code in (400, 404, 422)
    response = person.post(f"missions/{mission['id']}/restore", {})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "checkpoint_id"


def test_retire_drops_a_constraint_from_the_bundle_but_keeps_it(agent, person, mission):
    constraint = Constraint.objects.get(mission_id=mission["id"])
    response = person.post(f"missions/{mission['id']}/constraints/{constraint.pk}/retire")
    assert response.status_code == 200
    assert response.json()["retired_at"] is not None
    assert agent.get(f"missions/{mission['id']}/resume").json()["constraints"] == []
    assert Constraint.objects.filter(pk=constraint.pk).exists()


def test_retiring_twice_is_invalid_transition(person, mission):
    constraint = Constraint.objects.get(mission_id=mission["id"])
    person.post(f"missions/{mission['id']}/constraints/{constraint.pk}/retire")
    response = person.post(f"missions/{mission['id']}/constraints/{constraint.pk}/retire")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_retiring_a_constraint_of_another_mission_is_not_found(person, mission):
    other = person.post("missions", {"title": "Other", "objective": "O", "constraints": ["Elsewhere"]}).json()
    theirs = Constraint.objects.get(mission_id=other["id"])
    response = person.post(f"missions/{mission['id']}/constraints/{theirs.pk}/retire")
    assert response.status_code == 404
    assert Constraint.objects.get(pk=theirs.pk).retired_at is None


@pytest.mark.parametrize("action", ["pause", "unpause", "cancel"])
def test_another_person_cannot_control_the_mission(bob_person, mission, action):
    assert bob_person.post(f"missions/{mission['id']}/{action}").status_code == 404
    assert status(mission) == "ready"


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_an_agent_cannot_control_its_mission(agent, mission, action):
    response = agent.post(f"missions/{mission['id']}/{action}")
    assert response.status_code == 403
    assert status(mission) == "ready"
