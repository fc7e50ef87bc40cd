"""POST /runs/{id}/milestones and the people-only POST /milestones/{id}/review."""

import pytest

from checkpoints.models import Checkpoint
from quests.models import Constraint, Milestone, Mission, Run
from quests.selectors.people import inbox_milestones

pytestmark = pytest.mark.django_db

MILESTONE_FIELDS = {"id", "kind", "title", "summary", "review_status", "note", "gate", "checkpoint_id"}


def claim(agent, run: dict, **body) -> dict:
    response = agent.post(f"runs/{run['id']}/milestones", {"kind": "research_complete", "title": "Research done", **body})
    assert response.status_code in (200, 201), response.content
    return response.json()


def review(person, milestone: dict, action: str, note: str = ""):
    return person.post(f"milestones/{milestone['id']}/review", {"action": action, "note": note})


def test_a_claim_is_pending_review_and_bound_to_a_new_checkpoint(agent, mission, run):
    response = agent.post(
        f"runs/{run['id']}/milestones",
        {"kind": "research_complete", "title": "Research done", "summary": "Three venues", "agent_state": {"venues": 3}},
    )
    assert response.status_code == 201
    body = response.json()
    assert MILESTONE_FIELDS <= set(body)
    assert (body["review_status"], body["gate"], body["summary"]) == ("pending_review", False, "Three venues")
    checkpoint = agent.get(f"checkpoints/{body['checkpoint_id']}").json()
    assert (checkpoint["trigger"], checkpoint["agent_state"], checkpoint["verified"]) == ("milestone", {"venues": 3}, False)


def test_an_ordinary_milestone_keeps_the_run_going(agent, mission, run):
    claim(agent, run)
    assert Run.objects.get(pk=run["id"]).ended_at is None
    assert Mission.objects.get(pk=mission["id"]).status == "running"


def test_a_gate_milestone_ends_the_run_waiting_for_approval(agent, mission, run):
    milestone = claim(agent, run, gate=True, title="Plan ready")
    ended = Run.objects.get(pk=run["id"])
    assert (ended.ended_at is not None, ended.stop_reason) == (True, "waiting_for_approval")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["mission"]["status"] == "waiting_for_approval"
    assert bundle["next_action"] == "await_approval"
    assert "Plan ready" in bundle["message"]
    # The milestone's own checkpoint is the one the gate writes: no extra stop checkpoint.
    assert Mission.objects.get(pk=mission["id"]).head_checkpoint_id == milestone["checkpoint_id"]
    assert not Checkpoint.objects.filter(mission_id=mission["id"], trigger="stop").exists()


def test_approving_verifies_the_checkpoint(agent, person, mission, run):
    milestone = claim(agent, run, gate=True)
    response = review(person, milestone, "approve")
    assert response.status_code == 200
    assert response.json()["review_status"] == "approved"
    assert Checkpoint.objects.get(pk=milestone["checkpoint_id"]).verified is True
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["last_verified_checkpoint"]["id"] == milestone["checkpoint_id"]
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "ready"
    assert agent.get(f"checkpoints/{milestone['checkpoint_id']}").json()["verified"] is True


def test_the_last_verified_checkpoint_never_moves_back(agent, person, mission, run):
    older = claim(agent, run, title="First")
    newer = claim(agent, run, title="Second", kind="plan_approved")
    review(person, newer, "approve")
    review(person, older, "approve")
    assert Mission.objects.get(pk=mission["id"]).last_verified_checkpoint_id == newer["checkpoint_id"]


def test_a_correction_needs_a_note(agent, person, run):
    milestone = claim(agent, run)
    response = review(person, milestone, "correct", note="   ")
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "note"
    assert Milestone.objects.get(pk=milestone["id"]).review_status == "pending_review"


def test_a_correction_becomes_a_constraint(agent, person, mission, run):
    milestone = claim(agent, run, gate=True)
    response = review(person, milestone, "correct", note="Only venues near a station")
    assert response.status_code == 200
    assert (response.json()["review_status"], response.json()["note"]) == ("corrected", "Only venues near a station")
    assert Constraint.objects.filter(mission_id=mission["id"], source="correction", text="Only venues near a station").exists()
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert {"text": "Only venues near a station", "source": "correction"}.items() <= bundle["constraints"][-1].items()
    assert bundle["mission"]["status"] == "ready"
    assert Checkpoint.objects.get(pk=milestone["checkpoint_id"]).verified is False


def test_a_pause_leaves_the_milestone_pending_review(agent, person, mission, run):
    milestone = claim(agent, run, gate=True)
    response = review(person, milestone, "pause")
    assert response.status_code == 200
    assert response.json()["review_status"] == "pending_review"
    assert Mission.objects.get(pk=mission["id"]).status == "paused"
    person.post(f"missions/{mission['id']}/unpause")
    assert Mission.objects.get(pk=mission["id"]).status == "waiting_for_approval"
    review(person, milestone, "approve")
    assert Mission.objects.get(pk=mission["id"]).status == "ready"


def test_a_pause_review_ends_an_active_run(agent, person, mission, run):
    milestone = claim(agent, run)
    review(person, milestone, "pause")
    assert Run.objects.get(pk=run["id"]).stop_reason == "paused_by_user"
    assert Milestone.objects.get(pk=milestone["id"]).review_status == "pending_review"


@pytest.mark.parametrize("first", ["approve", "correct"])
def test_reviewing_twice_is_invalid_transition(agent, person, run, first):
    milestone = claim(agent, run)
    assert review(person, milestone, first, note="fix it").status_code == 200
    response = review(person, milestone, "approve")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_an_agent_cannot_review(agent, run):
    milestone = claim(agent, run)
    assert review(agent, milestone, "approve").status_code == 403
    assert Milestone.objects.get(pk=milestone["id"]).review_status == "pending_review"


def test_another_person_cannot_see_the_milestone(agent, bob_person, run):
    milestone = claim(agent, run)
    assert review(bob_person, milestone, "approve").status_code == 404


def test_an_unknown_kind_is_refused(agent, run):
    response = agent.post(f"runs/{run['id']}/milestones", {"kind": "vibes_checked", "title": "x"})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "kind"


def test_an_unknown_review_action_is_refused(agent, person, run):
    milestone = claim(agent, run)
    response = review(person, milestone, "ignore")
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "action"


def test_evidence_must_name_records_of_the_mission(agent, run):
    evidence = agent.post(f"runs/{run['id']}/records", {"kind": "evidence", "text": "Quote"}).json()
    assert claim(agent, run, evidence=[evidence["id"]])["review_status"] == "pending_review"
    response = agent.post(f"runs/{run['id']}/milestones", {"kind": "custom", "title": "x", "evidence": [evidence["id"] + 999]})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "evidence"


def test_a_gate_claim_key_replays_after_the_run_it_ended(agent, run):
    body = {"kind": "plan_approved", "title": "Plan", "gate": True, "key": "gate-1"}
    first = agent.post(f"runs/{run['id']}/milestones", body)
    again = agent.post(f"runs/{run['id']}/milestones", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = agent.post(f"runs/{run['id']}/milestones", {**body, "title": "Another plan"})
    assert other.json()["error"]["code"] == "key_reuse"
    assert Milestone.objects.count() == 1


def test_pending_milestones_are_in_the_inbox_until_reviewed(agent, person, alice, run):
    milestone = claim(agent, run)
    assert list(inbox_milestones(alice).values_list("pk", flat=True)) == [milestone["id"]]
    review(person, milestone, "approve")
    assert not inbox_milestones(alice).exists()


def test_progress_comes_only_from_approved_milestones(agent, person, mission, run):
    first = claim(agent, run)
    claim(agent, run)
    m = agent.get(f"missions/{mission['id']}").json()
    # A second claim of a planned kind does not add to `planned`.
    assert m["progress"] == {"approved": 0, "planned": 2}
    review(person, first, "approve")
    assert agent.get(f"missions/{mission['id']}").json()["progress"] == {"approved": 1, "planned": 2}
