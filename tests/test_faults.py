"""Faults survived, with real processes (issue 12): a worker killed in the middle of a purge batch
leaves the batch all or nothing, and the next run finishes the job; Redis stopped and restarted
under agent traffic loses no answer, and every snapshot request is done, none twice."""

import sys
import threading
import time
from collections import Counter

import httpx
import pytest

from checkpoints.models import Checkpoint, PurgeLog, RetentionPolicy, SnapshotRequest
from quests.models import Mission
from quests.services.tokens import token_create
from tests.process_probes import PURGE_HELD
from tests.processes import ApiServer, Process, Worker, free_port, wait_for
from tests.test_celery_worker import background, clean_broker, open_requests  # noqa: F401  (clean_broker: a fixture)
from tests.test_retention_interrupted import every_reference_resolves
from tests.test_retention_purge import LATER, assert_intact, assert_purged, finished_mission

pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True)]


def purge(tmp_path, name: str, as_of: str, *, held: bool) -> Process:
    command = ["manage.py", "purge_expired", "--as-of", as_of]
    probed = [sys.executable, "-m", "tests.process_probes", "hold-purge", *command] if held else [sys.executable, *command]
    return Process(name, probed, tmp_path)


def test_a_worker_killed_in_the_middle_of_a_purge_batch_leaves_it_whole_and_the_next_run_finishes(agent, person, tmp_path):
    missions = [finished_mission(agent, person, title) for title in ("First", "Second")]
    RetentionPolicy.objects.update(purge_batch_size=1)
    as_of = (max(Mission.objects.get(pk=m["id"]).ended_at for m in missions) + LATER).isoformat()

    killed = purge(tmp_path, "killed-purge", as_of, held=True)
    try:
        # The first batch has deleted its mission's checkpoints, records, approvals… and not committed.
        killed.wait_for_output(PURGE_HELD, timeout=60)
    finally:
        killed.kill()
    for mission in missions:
        assert_intact(mission["id"])  # the killed batch is all or nothing: nothing
    every_reference_resolves()
    log = PurgeLog.objects.get()
    assert log.finished_at is None and not log.counts.get("missions")

    finishing = purge(tmp_path, "next-purge", as_of, held=False)
    finishing.proc.wait(timeout=120)
    assert finishing.proc.returncode == 0, finishing.output()
    for mission in missions:
        assert_purged(mission["id"])
    every_reference_resolves()
    assert PurgeLog.objects.order_by("-id").first().finished_at is not None


class Redis(Process):
    """A throwaway Redis of this test on its own port (never the suite's), keeping nothing on disk:
    a restart loses every queued message, as a crashed broker would."""

    def __init__(self, tmp_path, port: int, name: str) -> None:
        super().__init__(name, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], tmp_path)
        self.wait_for_output("Ready to accept connections")


def test_redis_stopped_and_restarted_under_load_every_snapshot_request_is_done_once(alice, tmp_path, processes):
    port = free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    redis_server = Redis(tmp_path, port, "redis-1")
    processes.append(redis_server)
    api = ApiServer(tmp_path, CELERY_BROKER_URL=broker)
    processes.append(api)
    worker = Worker(tmp_path, "through-outage", beat=True, CELERY_BROKER_URL=broker, QUESTLOG_SNAPSHOT_SWEEP_INTERVAL="1")
    processes.append(worker)
    _, raw = token_create(user=alice, name="redis-outage")
    answers: list[int] = []
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30) as client:
            runs = []
            for m in range(3):
                mission = client.post("missions", json={"title": f"Quest {m}", "objective": "o"}).json()
                runs.append(client.post(f"missions/{mission['id']}/runs", json={"agent": "load"}).json()["run"]["id"])
            n = 0
            while not stop.is_set():
                for run_id in runs:
                    answers.append(client.post(f"runs/{run_id}/records", json={"kind": "decision", "text": f"decision {n}"}).status_code)
                n += 1
                time.sleep(0.05)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        time.sleep(3)
        redis_server.kill()  # the broker goes away mid-traffic, with whatever it had queued
        down_at = len(answers)
        time.sleep(5)
        restarted = Redis(tmp_path, port, "redis-2")
        processes.append(restarted)
        time.sleep(3)
        if worker.proc.poll() is not None:
            # Celery's worker can exit when Redis vanishes under it (kombu restoring its unacked
            # messages on a connection that is gone: "Unrecoverable error"); a supervisor
            # (systemd Restart=always, see the README) starts it again, as this test does.
            print(f"the worker exited during the outage ({worker.proc.returncode}); restarted as a supervisor would")
            processes.append(Worker(tmp_path, "after-outage", beat=True, CELERY_BROKER_URL=broker, QUESTLOG_SNAPSHOT_SWEEP_INTERVAL="1"))
    finally:
        stop.set()
        thread.join(timeout=60)
    assert answers and set(answers) == {201}, Counter(answers)
    assert len(answers) > down_at, "traffic went on while the broker was down"
    missions = list(Mission.objects.filter(owner=alice).values_list("pk", flat=True))
    wait_for(lambda: all(open_requests(m) == 0 for m in missions), 60, "every snapshot request done after the restart")
    done = SnapshotRequest.objects.filter(mission_id__in=missions, status="done").count()
    print(f"{len(answers)} answers, all 201, {len(answers) - down_at} of them while Redis was down or restarting; {done} snapshot requests done")
    for mission_id in missions:
        taken = list(SnapshotRequest.objects.filter(mission_id=mission_id, outcome="taken").values_list("checkpoint_id", flat=True))
        snapshots = [c.pk for c in background(mission_id)]
        assert len(taken) == len(set(taken)), "a request was taken twice"
        assert sorted(taken) == sorted(snapshots), "every background checkpoint belongs to exactly one request"
        seqs = list(Checkpoint.objects.filter(mission_id=mission_id).values_list("seq", flat=True))
        assert len(seqs) == len(set(seqs))
