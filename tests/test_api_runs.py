"""Runs, heartbeats, fencing and stop reasons (API.md: Runs, heartbeats and fencing)."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from checkpoints.models import Checkpoint
from quests.models import Mission, Run

pytestmark = pytest.mark.django_db


def end_run(agent, run: dict) -> None:
    response = agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "API down"})
    assert response.status_code == 200, response.content


def test_a_heartbeat_refreshes_the_run(agent, run):
    Run.objects.filter(pk=run["id"]).update(heartbeat_at=timezone.now() - timedelta(seconds=30))
    before = Run.objects.get(pk=run["id"]).heartbeat_at
    response = agent.post(f"runs/{run['id']}/heartbeat")
    assert response.status_code == 200
    assert response.json()["id"] == run["id"]
    assert parse_datetime(response.json()["heartbeat_at"]) > before


def test_a_heartbeat_from_an_ended_run_is_run_ended(agent, run):
    end_run(agent, run)
    response = agent.post(f"runs/{run['id']}/heartbeat")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "run_ended"
    assert error["stop_reason"] == "blocked_external"


def test_every_run_scoped_write_refreshes_the_heartbeat(agent, run):
    aged = timezone.now() - timedelta(seconds=30)
    writes = [
        ("checkpoints", {"agent_state": {"a": 1}}),
        ("records", {"kind": "note", "text": "n"}),
        ("operations", {"key": "k", "kind": "email", "target": "t", "request": {}}),
        ("memory-proposals", {"name": "n", "value": "v", "reason": "r"}),
        ("milestones", {"kind": "custom", "title": "t"}),
    ]
    for path, body in writes:
        Run.objects.filter(pk=run["id"]).update(heartbeat_at=aged)
        response = agent.post(f"runs/{run['id']}/{path}", body)
        assert response.status_code == 201, (path, response.content)
        assert Run.objects.get(pk=run["id"]).heartbeat_at > aged, path


@pytest.mark.parametrize(
    ("path", "body"),
    [("approvals", {"action": "pay", "payload": {}, "reason": "r"}), ("milestones", {"kind": "custom", "title": "t", "gate": True})],
    ids=["approval-request", "gated-milestone"],
)
def test_a_write_that_ends_the_run_refreshes_its_heartbeat_too(agent, run, path, body):
    """The heartbeat goes with the write's checkpoint: the run's last sign of life is its last write."""
    aged = timezone.now() - timedelta(seconds=30)
    Run.objects.filter(pk=run["id"]).update(heartbeat_at=aged)
    response = agent.post(f"runs/{run['id']}/{path}", body)
    assert response.status_code == 201, response.content
    ended = Run.objects.get(pk=run["id"])
    assert ended.ended_at is not None
    assert ended.heartbeat_at > aged


RUN_SCOPED_WRITES = [
    ("heartbeat", None),
    ("checkpoints", {"agent_state": {"a": 1}}),
    ("records", {"kind": "decision", "text": "d"}),
    ("operations", {"key": "new-op", "kind": "email", "target": "t", "request": {}}),
    ("approvals", {"action": "pay", "payload": {}, "reason": "r"}),
    ("milestones", {"kind": "custom", "title": "t"}),
    ("memory-proposals", {"name": "n", "value": "v", "reason": "r"}),
    ("stop", {"reason": "completed"}),
]


@pytest.mark.parametrize("path, body", RUN_SCOPED_WRITES, ids=[p for p, _ in RUN_SCOPED_WRITES])
@pytest.mark.parametrize("stop_reason", ["blocked_external", "failed_retry_budget", "completed"])
def test_every_run_scoped_write_from_an_ended_run_is_run_ended(agent, run, path, body, stop_reason):
    agent.post(f"runs/{run['id']}/stop", {"reason": stop_reason, "detail": "d"})
    response = agent.post(f"runs/{run['id']}/{path}", body)
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "run_ended"
    assert error["stop_reason"] == stop_reason
    assert error["message"]


@pytest.mark.parametrize("path, body", RUN_SCOPED_WRITES, ids=[p for p, _ in RUN_SCOPED_WRITES])
def test_a_run_ended_by_a_pause_is_fenced(agent, person, run, path, body):
    person.post(f"missions/{run['mission_id']}/pause")
    response = agent.post(f"runs/{run['id']}/{path}", body)
    assert response.status_code == 409
    assert response.json()["error"] == {**response.json()["error"], "code": "run_ended", "stop_reason": "paused_by_user"}


def test_a_run_ended_by_a_new_start_is_fenced_as_interrupted(agent, mission, run, make_stale):
    make_stale(run["id"])
    assert agent.post(f"missions/{mission['id']}/runs").status_code == 201
    response = agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "zombie"})
    assert response.status_code == 409
    assert response.json()["error"]["stop_reason"] == "interrupted"


@pytest.mark.parametrize(
    "path, body",
    [
        ("checkpoints", {"agent_state": {"a": 1}, "key": "k1"}),
        ("records", {"kind": "decision", "text": "d", "key": "k1"}),
        ("memory-proposals", {"name": "n", "value": "v", "reason": "r", "key": "k1"}),
        ("milestones", {"kind": "custom", "title": "t", "key": "k1"}),
        ("operations", {"key": "k1", "kind": "email", "target": "t", "request": {}}),
    ],
)
def test_a_replay_of_a_used_key_from_an_ended_run_answers_the_original(agent, run, path, body):
    first = agent.post(f"runs/{run['id']}/{path}", body)
    assert first.status_code == 201, first.content
    end_run(agent, run)
    again = agent.post(f"runs/{run['id']}/{path}", body)
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"]
    fresh = agent.post(f"runs/{run['id']}/{path}", {**body, "key": "k2"})
    assert fresh.status_code == 409
    assert fresh.json()["error"]["code"] == "run_ended"


def test_a_stale_run_is_not_ended_by_its_own_next_write(agent, mission, run, make_stale):
    make_stale(run["id"])
    response = agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "still here"})
    assert response.status_code == 201
    assert Run.objects.get(pk=run["id"]).ended_at is None
    # Its write refreshed the heartbeat, so it is fresh again and keeps the mission.
    assert agent.post(f"missions/{mission['id']}/runs").json()["error"]["code"] == "run_active"


def test_a_stale_runs_own_heartbeat_keeps_it_alive(agent, mission, run, make_stale):
    make_stale(run["id"])
    assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert Run.objects.get(pk=run["id"]).ended_at is None
    assert Mission.objects.get(pk=mission["id"]).status == "running"


def test_a_stale_run_stays_active_until_something_ends_it(agent, mission, run, make_stale):
    make_stale(run["id"])
    assert agent.get(f"missions/{mission['id']}").json()["status"] == "running"
    assert agent.get(f"missions/{mission['id']}/resume").status_code == 200
    assert Run.objects.get(pk=run["id"]).ended_at is None


def test_a_new_start_ends_a_stale_run_interrupted(agent, mission, run, make_stale):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 3}})
    make_stale(run["id"])
    response = agent.post(f"missions/{mission['id']}/runs")
    assert response.status_code == 201
    old = Run.objects.get(pk=run["id"])
    assert old.ended_at is not None
    assert old.stop_reason == "interrupted"
    new_run = response.json()["run"]
    assert new_run["number"] == 2
    assert new_run["ended_at"] is None
    bundle = response.json()["resume"]
    assert bundle["mission"]["stop_reason"] == "interrupted"
    assert bundle["mission"]["status"] == "running"
    assert bundle["checkpoint"]["trigger"] == "stop"
    assert bundle["checkpoint"]["agent_state"] == {"step": 3}
    assert Run.objects.filter(mission_id=mission["id"], ended_at__isnull=True).count() == 1


def test_the_heartbeat_timeout_setting_decides_staleness(agent, mission, run):
    Run.objects.filter(pk=run["id"]).update(heartbeat_at=timezone.now() - timedelta(seconds=10))
    assert agent.post(f"missions/{mission['id']}/runs").status_code == 409
    with override_settings(QUESTLOG_HEARTBEAT_TIMEOUT=5):
        assert agent.post(f"missions/{mission['id']}/runs").status_code == 201
    assert Run.objects.get(pk=run["id"]).stop_reason == "interrupted"


def test_stop_completed_completes_the_mission(agent, mission, run):
    response = agent.post(f"runs/{run['id']}/stop", {"reason": "completed", "detail": "All booked."})
    assert response.status_code == 200
    body = response.json()
    assert body["stop_reason"] == "completed"
    assert body["ended_at"] is not None
    m = agent.get(f"missions/{mission['id']}").json()
    assert (m["status"], m["stop_reason"], m["stop_detail"]) == ("completed", "completed", "All booked.")
    assert m["ended_at"] is not None
    assert agent.get(f"missions/{mission['id']}/resume").json()["next_action"] == "none"


def test_stop_blocked_external_blocks_the_mission_with_its_retry_time(agent, mission, run):
    retry_at = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    response = agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "Venue API is down", "retry_at": retry_at.isoformat()})
    assert response.status_code == 200
    m = agent.get(f"missions/{mission['id']}").json()
    assert (m["status"], m["stop_reason"], m["stop_detail"]) == ("blocked", "blocked_external", "Venue API is down")
    assert parse_datetime(m["retry_at"]) == retry_at
    assert m["ended_at"] is None
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "retry_external"
    assert "Venue API is down" in bundle["message"]


def test_stop_failed_retry_budget_fails_the_mission(agent, mission, run):
    agent.post(f"runs/{run['id']}/stop", {"reason": "failed_retry_budget", "detail": "Five tries failed"})
    m = agent.get(f"missions/{mission['id']}").json()
    assert (m["status"], m["stop_reason"]) == ("failed", "failed_retry_budget")
    assert agent.get(f"missions/{mission['id']}/resume").json()["next_action"] == "await_user"


@pytest.mark.parametrize("reason", ["paused_by_user", "interrupted", "cancelled_by_user", "waiting_for_approval", "done"])
def test_an_agent_cannot_stop_with_a_reason_that_is_not_its_own(agent, run, reason):
    response = agent.post(f"runs/{run['id']}/stop", {"reason": reason})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "reason"
    assert Run.objects.get(pk=run["id"]).ended_at is None


@pytest.mark.parametrize("reason", ["completed", "blocked_external", "failed_retry_budget"])
def test_every_stop_writes_a_stop_checkpoint_carrying_the_agent_state(agent, mission, run, reason):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"plan": ["a", "b"]}})
    agent.post(f"runs/{run['id']}/stop", {"reason": reason})
    head = Mission.objects.get(pk=mission["id"]).head_checkpoint
    assert head.trigger == "stop"
    assert head.run_id == run["id"]
    response = agent.get(f"checkpoints/{head.pk}")
    assert response.json()["agent_state"] == {"plan": ["a", "b"]}


def test_another_users_run_is_not_found(bob_agent, run):
    assert bob_agent.post(f"runs/{run['id']}/heartbeat").status_code == 404
    assert bob_agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "x"}).status_code == 404
    assert bob_agent.post(f"runs/{run['id']}/stop", {"reason": "completed"}).status_code == 404
    assert Run.objects.get(pk=run["id"]).ended_at is None


def test_an_ended_run_writes_nothing(agent, run):
    end_run(agent, run)
    before = Checkpoint.objects.count()
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}})
    assert Checkpoint.objects.count() == before


def test_a_person_may_use_the_agent_endpoints_with_a_session(person, mission):
    response = person.post(f"missions/{mission['id']}/runs", {"agent": "by hand"})
    assert response.status_code == 201
    run = response.json()["run"]
    assert person.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"by": "hand"}}).status_code == 201
    assert person.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert person.post(f"runs/{run['id']}/stop", {"reason": "completed"}).status_code == 200


def test_a_moment_with_any_rfc3339_offset_is_kept_as_the_same_moment(agent, run):
    # PostgreSQL keeps offsets only up to ±15:59; RFC 3339 allows ±23:59.
    answer = agent.post(f"runs/{run['id']}/stop", {"reason": "failed_retry_budget", "retry_at": "2839-09-04T11:29:46.537-17:11"})
    assert answer.status_code == 200, answer.content
    mission = agent.get(f"missions/{run['mission_id']}").json()
    assert mission["retry_at"].startswith("2839-09-05T04:40:46.537")


def test_a_moment_past_the_last_representable_one_in_utc_is_refused(agent, run):
    answer = agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "retry_at": "9999-12-31T23:59:59-01:00"})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "retry_at"
