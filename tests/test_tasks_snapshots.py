"""Background snapshots: requests, debouncing, the compare-and-set claim, no-op snapshots and the
sweep (quests.services.snapshots, quests.tasks.snapshot_take_task). Real workers are in
test_celery_worker.py; here the task runs in-process against real PostgreSQL."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from checkpoints.models import Checkpoint, SnapshotRequest
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.services import snapshots
from quests.tasks import snapshot_take_task, snapshots_sweep_task

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def short_interval(settings):
    settings.QUESTLOG_SNAPSHOT_INTERVAL = 10
    settings.QUESTLOG_SNAPSHOT_STALE_AFTER = 60


@pytest.fixture(autouse=True)
def empty_queues(settings):
    """Publishes in this file go to the test broker; leave nothing behind for a later worker."""
    yield
    from config.celery import app

    with app.connection_for_write() as conn:
        for queue in ("snapshots", "maintenance"):
            conn.default_channel.queue_purge(queue)


def pending(mission_id: int) -> SnapshotRequest:
    return SnapshotRequest.objects.get(mission_id=mission_id, status="pending")


def background(mission_id: int) -> list[Checkpoint]:
    return list(Checkpoint.objects.filter(mission_id=mission_id, trigger="background"))


def record(agent, run, text: str = "Use Lakeside", kind: str = "decision", **body):
    response = agent.post(f"runs/{run['id']}/records", {"kind": kind, "text": text, **body})
    assert response.status_code in (200, 201), response.content
    return response.json()


def make_due(request: SnapshotRequest) -> None:
    SnapshotRequest.objects.filter(pk=request.pk).update(not_before=timezone.now() - timedelta(seconds=1))


def test_activity_asks_for_one_pending_snapshot_per_mission(agent, mission, run):
    for i in range(5):
        record(agent, run, f"decision {i}")
    assert SnapshotRequest.objects.filter(mission_id=mission["id"], status="pending").count() == 1


def test_the_first_change_after_a_quiet_spell_is_due_at_once(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    assert request.not_before <= request.requested_at


def test_it_takes_a_background_checkpoint_and_marks_the_request_done(agent, mission, run):
    record(agent, run, "Use Lakeside")
    request = pending(mission["id"])
    assert snapshot_take_task(request.pk) == "taken"
    request.refresh_from_db()
    assert request.status == "done"
    assert request.attempts == 1
    checkpoint = Checkpoint.objects.get(pk=request.checkpoint_id)
    assert checkpoint.trigger == "background"
    assert Mission.objects.get(pk=mission["id"]).head_checkpoint_id == checkpoint.pk
    state, _ = checkpoint_documents(checkpoint)
    assert [d["text"] for d in state["decisions"]] == ["Use Lakeside"]


def test_running_the_task_twice_takes_one_snapshot(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    assert snapshot_take_task(request.pk) == "taken"
    assert snapshot_take_task(request.pk) == "already_done"
    assert len(background(mission["id"])) == 1


def test_it_writes_nothing_when_the_state_equals_the_head(agent, mission, run):
    record(agent, run)
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 1}})
    head = Mission.objects.get(pk=mission["id"]).head_checkpoint_id
    assert snapshot_take_task(pending(mission["id"]).pk) == "unchanged"
    assert background(mission["id"]) == []
    assert Mission.objects.get(pk=mission["id"]).head_checkpoint_id == head
    assert SnapshotRequest.objects.get(mission_id=mission["id"]).outcome == "unchanged"


def test_repeated_identical_activity_adds_no_snapshot(agent, mission, run):
    op = agent.post(f"runs/{run['id']}/operations", {"key": "k1", "kind": "email", "target": "x", "request": {}}).json()
    agent.post(f"operations/{op['id']}/observe", {"external_status": "sent"})
    assert snapshot_take_task(pending(mission["id"]).pk) == "taken"
    for _ in range(3):
        assert agent.post(f"operations/{op['id']}/observe", {"external_status": "sent"}).status_code == 200
        request = pending(mission["id"])
        make_due(request)
        assert snapshot_take_task(request.pk) == "unchanged"
    assert len(background(mission["id"])) == 1


def test_a_background_checkpoint_carries_the_head_agent_state(agent, mission, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"plan": ["a", "b"]}})
    record(agent, run)
    snapshot_take_task(pending(mission["id"]).pk)
    checkpoint = background(mission["id"])[0]
    assert checkpoint_documents(checkpoint)[1] == {"plan": ["a", "b"]}
    assert checkpoint.parent.trigger == "agent"


def test_snapshots_of_one_mission_are_at_least_the_interval_apart(agent, mission, run):
    record(agent, run, "one")
    first = pending(mission["id"])
    snapshot_take_task(first.pk)
    first.refresh_from_db()
    record(agent, run, "two")
    second = pending(mission["id"])
    assert second.not_before >= first.claimed_at + timedelta(seconds=10)
    assert snapshot_take_task(second.pk) == "not_due"
    second.refresh_from_db()
    assert second.status == "pending"
    assert len(background(mission["id"])) == 1


def test_activity_while_a_snapshot_is_being_written_gets_a_request_of_its_own(agent, mission, run):
    record(agent, run, "one")
    first = pending(mission["id"])
    SnapshotRequest.objects.filter(pk=first.pk).update(status="claimed", claimed_at=timezone.now(), claim_token="w1")
    record(agent, run, "two")
    assert pending(mission["id"]).pk != first.pk


def test_a_live_claim_is_left_alone_and_a_stale_one_is_taken_over(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    SnapshotRequest.objects.filter(pk=request.pk).update(status="claimed", claimed_at=timezone.now(), claim_token="w1", attempts=1)
    assert snapshot_take_task(request.pk) == "already_claimed"
    SnapshotRequest.objects.filter(pk=request.pk).update(claimed_at=timezone.now() - timedelta(seconds=61))
    assert snapshot_take_task(request.pk) == "taken"
    request.refresh_from_db()
    assert (request.status, request.attempts) == ("done", 2)
    assert len(background(mission["id"])) == 1


def test_a_request_of_a_deleted_mission_is_missing(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    Mission.objects.filter(pk=mission["id"]).delete()
    assert snapshot_take_task(request.pk) == "missing"


def test_activity_publishes_after_commit_and_records_it(agent, mission, run, django_capture_on_commit_callbacks):
    SnapshotRequest.objects.filter(mission_id=mission["id"]).delete()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        record(agent, run)
    assert len(callbacks) == 1
    assert pending(mission["id"]).enqueued_at is not None


def test_the_sweep_publishes_what_was_never_published_or_waited_too_long(agent, alice, mission, run):
    record(agent, run)
    unpublished = pending(mission["id"])
    other = agent.post("missions", {"title": "t", "objective": "o"}).json()
    other_run = agent.post(f"missions/{other['id']}/runs", {}).json()["run"]
    record(agent, other_run)
    lost = pending(other["id"])
    long_ago = timezone.now() - timedelta(seconds=120)
    SnapshotRequest.objects.filter(pk=lost.pk).update(not_before=long_ago, enqueued_at=long_ago)
    third = agent.post("missions", {"title": "t3", "objective": "o"}).json()
    third_run = agent.post(f"missions/{third['id']}/runs", {}).json()["run"]
    record(agent, third_run)
    recent = pending(third["id"])
    SnapshotRequest.objects.filter(pk=recent.pk).update(enqueued_at=timezone.now())

    assert snapshots_sweep_task() == 2
    assert SnapshotRequest.objects.get(pk=unpublished.pk).enqueued_at is not None
    assert SnapshotRequest.objects.get(pk=lost.pk).enqueued_at > long_ago
    assert snapshots_sweep_task() == 0


def test_the_sweep_publishes_a_claim_whose_worker_went_silent(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    SnapshotRequest.objects.filter(pk=request.pk).update(
        status="claimed", claimed_at=timezone.now() - timedelta(seconds=61), claim_token="dead", enqueued_at=timezone.now()
    )
    assert snapshots_sweep_task() == 1


@pytest.mark.django_db(transaction=True)
def test_two_workers_running_the_same_request_at_once_take_one_snapshot(agent, mission, run):
    record(agent, run)
    request = pending(mission["id"])
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        try:
            barrier.wait()
            outcomes.append(snapshots.snapshot_take(request_id=request.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes).count("taken") == 1
    assert len(background(mission["id"])) == 1
    assert SnapshotRequest.objects.get(pk=request.pk).attempts == 1


def test_status_reports_pending_requests_and_stalled_runs(agent, mission, run, make_stale):
    record(agent, run)
    SnapshotRequest.objects.filter(mission_id=mission["id"]).update(not_before=timezone.now() - timedelta(seconds=42))
    make_stale(run["id"])
    status = snapshots.snapshots_status()
    assert status["pending"] == 1
    assert status["pending_unpublished"] == 1
    assert 41 < status["oldest_due_age_seconds"] < 60
    assert status["stalled_runs"] == 1
