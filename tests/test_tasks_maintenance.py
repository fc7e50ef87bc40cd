"""Periodic maintenance tasks (quests.tasks): stalled runs, approval expiry, pruning; their
schedule and queues; and `questlog_status`."""

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from checkpoints.models import Checkpoint, RetentionPolicy
from config.celery import app
from quests.models import Approval, Mission, Run
from quests.tasks import (
    approvals_expire_task,
    snapshot_take_task,
    snapshots_prune_task,
    snapshots_sweep_task,
    stalled_runs_sweep_task,
)

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


def test_the_stalled_runs_task_ends_a_silent_run_interrupted_and_leaves_its_attempts_to_reconcile(agent, mission, run, make_stale):
    op = agent.post(f"runs/{run['id']}/operations", {"key": "mail", "kind": "email", "target": "c", "request": {}}).json()
    agent.post(f"operations/{op['id']}/attempt")
    make_stale(run["id"])
    assert stalled_runs_sweep_task() == 1
    ended = Run.objects.get(pk=run["id"])
    assert ended.stop_reason == "interrupted"
    m = Mission.objects.get(pk=mission["id"])
    assert (m.status, m.stop_reason, m.head_checkpoint.trigger) == ("ready", "interrupted", "stop")
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["next_action"] == "reconcile"
    assert [o["key"] for o in bundle["operations"]["to_reconcile"]] == ["mail"]
    assert stalled_runs_sweep_task() == 0


def test_the_stalled_runs_task_leaves_a_live_run_alone(agent, run):
    assert stalled_runs_sweep_task() == 0
    assert Run.objects.get(pk=run["id"]).ended_at is None


def test_the_expiry_task_expires_an_approval_past_its_time_and_the_mission_is_ready_again(agent, mission, run):
    soon = (timezone.now() + timedelta(hours=1)).isoformat()
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "send the contract", "payload": {}, "reason": "risky", "expires_at": soon}).json()
    assert approvals_expire_task() == 0
    Approval.objects.filter(pk=approval["id"]).update(respond_by=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_task() == 1
    assert Approval.objects.get(pk=approval["id"]).status == "expired"
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    assert bundle["mission"]["status"] == "ready"
    assert bundle["next_action"] == "resume"
    assert [a["status"] for a in bundle["approvals"]] == ["expired"]
    assert approvals_expire_task() == 0


def test_the_prune_task_prunes_old_background_snapshots(agent, mission, run):
    from checkpoints.models import SnapshotRequest

    for i in range(4):
        agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": f"note {i}"})
        request = SnapshotRequest.objects.get(mission_id=mission["id"], status="pending")
        SnapshotRequest.objects.filter(pk=request.pk).update(not_before=timezone.now())
        assert snapshot_take_task(request.pk) == "taken"
        SnapshotRequest.objects.filter(pk=request.pk).update(claimed_at=timezone.now() - timedelta(minutes=1))
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 9}})
    Checkpoint.objects.filter(mission_id=mission["id"]).update(created_at=timezone.now() - timedelta(days=30))
    RetentionPolicy.objects.create(snapshot_prune_days=7, snapshot_keep_newest=1)
    result = snapshots_prune_task()
    # The first is the root and the newest is kept: two of four go.
    assert (result["missions"], result["checkpoints"]) == (1, 2)
    assert list(Checkpoint.objects.filter(mission_id=mission["id"]).values_list("trigger", flat=True).order_by("seq")) == [
        "background",
        "background",
        "agent",
    ]


def test_the_sweep_task_is_a_no_op_when_nothing_waits():
    assert snapshots_sweep_task() == 0


def test_every_periodic_task_is_scheduled_at_its_interval(settings):
    schedule = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    expected = {
        "quests.tasks.snapshots_sweep_task": settings.QUESTLOG_SNAPSHOT_SWEEP_INTERVAL,
        "quests.tasks.stalled_runs_sweep_task": settings.QUESTLOG_STALLED_SWEEP_INTERVAL,
        "quests.tasks.approvals_expire_task": settings.QUESTLOG_APPROVAL_EXPIRY_INTERVAL,
        "quests.tasks.snapshots_prune_task": settings.QUESTLOG_MAINTENANCE_INTERVAL,
    }
    assert set(expected) <= set(schedule)
    for task, seconds in expected.items():
        assert schedule[task]["schedule"] == timedelta(seconds=seconds)
        assert schedule[task]["options"]["expires"] == seconds
        assert task in app.tasks


def test_snapshots_and_maintenance_go_to_separate_queues():
    def queue(name: str) -> str:
        return app.amqp.router.route({}, name, args=(), kwargs={})["queue"].name

    assert queue("quests.tasks.snapshot_take_task") == "snapshots"
    for name in ("snapshots_sweep_task", "stalled_runs_sweep_task", "approvals_expire_task", "snapshots_prune_task"):
        assert queue(f"quests.tasks.{name}") == "maintenance"


def test_every_queue_a_task_is_routed_to_is_declared_so_a_worker_without_q_consumes_it():
    # A worker without -Q consumes exactly app.amqp.queues; a routed queue missing there never runs.
    declared = set(app.amqp.queues)
    for name in sorted(app.tasks):
        if name.startswith(("quests.", "checkpoints.")):
            assert app.amqp.router.route({}, name, args=(), kwargs={})["queue"].name in declared, name
    assert {"snapshots", "maintenance"} <= declared
    for name, queue in app.amqp.queues.items():
        assert (queue.exchange.name, queue.routing_key) == (name, name)  # no message reaches two queues


def test_every_task_acknowledges_late():
    for name in ("snapshot_take_task", "snapshots_sweep_task", "stalled_runs_sweep_task", "approvals_expire_task", "snapshots_prune_task"):
        assert app.tasks[f"quests.tasks.{name}"].acks_late is True


def test_questlog_status_prints_pending_requests_stalled_runs_and_queue_depths(agent, mission, run, make_stale):
    from checkpoints.models import SnapshotRequest

    SnapshotRequest.objects.filter(mission_id=mission["id"]).update(not_before=timezone.now() - timedelta(seconds=90))
    make_stale(run["id"])
    # Earlier tests in this worker that committed (live servers) published wake-ups that no worker
    # consumed; the depth this test reads is only its own once the broker's queues start empty.
    with app.connection_for_write() as conn:
        for queue in ("snapshots", "maintenance"):
            conn.default_channel.queue_purge(queue)
    out = StringIO()
    call_command("questlog_status", stdout=out)
    text = out.getvalue()
    assert "Snapshot requests pending: 1 (1 due, 1 not yet published)" in text
    assert "Oldest due request waiting: 9" in text  # 90-something seconds
    assert "Stalled runs (heartbeat too old): 1 of 1 active" in text
    assert "Queue depth: snapshots 0, maintenance 0" in text


def test_questlog_status_says_when_the_broker_cannot_tell():
    s = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}",
        "CELERY_BROKER_URL": "redis://127.0.0.1:9/4",
    }
    done = subprocess.run([sys.executable, "manage.py", "questlog_status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Queue depth: unknown (OperationalError" in done.stdout
    assert "Snapshot requests pending: 0" in done.stdout
