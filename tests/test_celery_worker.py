"""Background snapshots with real Celery workers (subprocesses) against Redis and the test
database: end to end, a worker killed in the middle of a snapshot, and a broker that is down
while an agent works. Every process a test starts is stopped by that test, by its pid."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from checkpoints.models import Checkpoint, SnapshotRequest
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.services.tokens import token_create
from tests.process_probes import SLEPT, SNAPSHOT_HELD

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def database_url() -> str:
    """The test database (not the one named in DATABASE_URL): what the subprocesses must use."""
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Process:
    """A subprocess of this test, logging to a file, stopped by pid."""

    def __init__(self, name: str, cmd: list[str], tmp_path: Path, **env: str) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        environment = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
            "QUESTLOG_DATA_DIR": str(tmp_path / "data"),
            "QUESTLOG_SNAPSHOT_INTERVAL": "1",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return text in self.output()

        wait_for(seen, timeout, f"{text!r} from {self.name}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def probed(probe: str, *command: str) -> list[str]:
    """A command run under one of tests/process_probes.py's test-only probes."""
    return [sys.executable, "-m", "tests.process_probes", probe, *command]


class Worker(Process):
    def __init__(
        self,
        tmp_path: Path,
        name: str,
        *,
        beat: bool = False,
        hold_snapshots: bool = False,
        queues: str | None = "snapshots,maintenance",
        **env: str,
    ) -> None:
        # queues=None: no -Q at all, as an operator following Celery's own docs starts a worker.
        celery = ["-m", "celery", "-A", "config", "worker", *(["-Q", queues] if queues else [])]
        cmd = [
            *(probed("hold-snapshots", *celery) if hold_snapshots else [sys.executable, *celery]),
            # solo: the task runs in the worker process itself, so SIGKILL really kills it mid-task.
            "--pool",
            "solo",
            "-n",
            f"{name}-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ]
        if beat:
            cmd += ["--beat", "--schedule", str(tmp_path / f"{name}-beat-schedule")]
        super().__init__(name, cmd, tmp_path, **env)
        self.wait_for_output(" ready.")


class ApiServer(Process):
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        # Every sleep of the server is reported: that is how a publish waits on a broker that is down.
        cmd = probed("record-sleeps", "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload")
        super().__init__("api", cmd, tmp_path, **env)
        self.url = f"http://127.0.0.1:{self.port}/api/v1/"

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"api exited:\n{self.output()[-3000:]}")
            try:
                return httpx.get(self.url + "openapi.json", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "the API server")


@pytest.fixture(autouse=True)
def clean_broker(settings) -> Iterator[None]:
    """This test's Redis database starts and ends empty, so no worker sees another test's work.
    Autouse, so it runs before the fixtures that already publish (mission creation)."""
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "these tests need Redis (make test sets it)"
    settings.QUESTLOG_SNAPSHOT_INTERVAL = 1
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.flushdb()
    yield
    broker.flushdb()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def open_requests(mission_id: int) -> int:
    return SnapshotRequest.objects.filter(mission_id=mission_id).exclude(status="done").count()


def background(mission_id: int) -> list[Checkpoint]:
    return list(Checkpoint.objects.filter(mission_id=mission_id, trigger="background").order_by("seq"))


def post(agent, path: str, body: dict | None = None) -> dict:
    response = agent.post(path, body)
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_a_worker_snapshots_agent_activity_and_repeated_identical_activity_adds_none(agent, mission, run, tmp_path, processes):
    processes.append(Worker(tmp_path, "e2e"))
    post(agent, f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside", "key": "d1"})
    post(agent, f"runs/{run['id']}/records", {"kind": "tool_output", "text": "x" * 5000})
    op = post(agent, f"runs/{run['id']}/operations", {"key": "hold", "kind": "hold", "target": "lodge", "request": {}})
    post(agent, f"operations/{op['id']}/observe", {"external_status": "held"})

    def settled() -> bool:
        head = Mission.objects.get(pk=mission["id"]).head_checkpoint
        return open_requests(mission["id"]) == 0 and head is not None and head.trigger == "background" and head.state_refs

    wait_for(settled, 30, "the background snapshot")
    head = Mission.objects.get(pk=mission["id"]).head_checkpoint
    state, _ = checkpoint_documents(head)
    assert [d["text"] for d in state["decisions"]] == ["Use Lakeside"]
    assert state["operations"][0]["external_status"] == "held"
    taken = background(mission["id"])

    last_request = SnapshotRequest.objects.order_by("-id").values_list("pk", flat=True).first()
    for _ in range(3):
        post(agent, f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside", "key": "d1"})
        post(agent, f"operations/{op['id']}/observe", {"external_status": "held"})
        post(agent, f"runs/{run['id']}/heartbeat")
    repeats = SnapshotRequest.objects.filter(mission_id=mission["id"], pk__gt=last_request)
    assert repeats.exists()  # the repeats did ask for a snapshot...
    wait_for(lambda: open_requests(mission["id"]) == 0, 30, "the repeated activity's requests")
    assert set(repeats.values_list("outcome", flat=True)) == {"unchanged"}
    assert background(mission["id"]) == taken  # ...and nothing new was written


def test_a_worker_started_without_queues_consumes_every_routed_queue_and_takes_the_snapshot(agent, mission, run, tmp_path, processes):
    worker = Worker(tmp_path, "plain", queues=None)
    processes.append(worker)
    # The worker's banner lists what it consumes: every queue a task is routed to, each bound to
    # its own exchange and key (so that no message is delivered to two queues).
    for queue in ("snapshots", "maintenance"):
        assert re.search(rf"\.> {queue} +exchange={queue}\(direct\) key={queue}\n", worker.output())
    post(agent, f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})

    def taken() -> bool:
        head = Mission.objects.get(pk=mission["id"]).head_checkpoint
        return open_requests(mission["id"]) == 0 and head is not None and head.trigger == "background"

    wait_for(taken, 30, "the background snapshot from a worker started without -Q")
    state, _ = checkpoint_documents(Mission.objects.get(pk=mission["id"]).head_checkpoint)
    assert [d["text"] for d in state["decisions"]] == ["Use Lakeside"]


def test_a_worker_killed_mid_snapshot_loses_nothing_and_its_request_completes_exactly_once(agent, mission, run, tmp_path, processes):
    post(agent, f"runs/{run['id']}/records", {"kind": "decision", "text": "Use Lakeside"})
    post(agent, f"runs/{run['id']}/records", {"kind": "blocker", "text": "Waiting for the quote"})
    request = SnapshotRequest.objects.get(mission_id=mission["id"], status="pending")

    slow = Worker(tmp_path, "slow", hold_snapshots=True)
    processes.append(slow)
    slow.wait_for_output(SNAPSHOT_HELD)  # it has claimed the request, written the checkpoint, and not committed
    slow.kill()
    request.refresh_from_db()
    assert (request.status, request.attempts) == ("claimed", 1)
    assert background(mission["id"]) == []

    processes.append(Worker(tmp_path, "rescuer", beat=True, QUESTLOG_SNAPSHOT_SWEEP_INTERVAL="1", QUESTLOG_SNAPSHOT_STALE_AFTER="2"))
    wait_for(lambda: SnapshotRequest.objects.get(pk=request.pk).status == "done", 45, "the rescued snapshot")
    request.refresh_from_db()
    assert (request.outcome, request.attempts) == ("taken", 2)
    snapshots = background(mission["id"])
    assert [c.pk for c in snapshots] == [request.checkpoint_id]
    state, _ = checkpoint_documents(snapshots[0])
    assert [b["text"] for b in state["blockers"]] == ["Waiting for the quote"]
    seqs = list(Checkpoint.objects.filter(mission_id=mission["id"]).values_list("seq", flat=True))
    assert len(seqs) == len(set(seqs))

    post(agent, f"runs/{run['id']}/records", {"kind": "decision", "text": "Book for 12"})
    wait_for(lambda: len(background(mission["id"])) == 2 and open_requests(mission["id"]) == 0, 30, "the next snapshot")


def test_with_the_broker_down_every_api_call_succeeds_fast_and_every_snapshot_is_taken_once_it_is_back(alice, tmp_path, processes):
    dead_broker = f"redis://127.0.0.1:{free_port()}/4"
    api = ApiServer(tmp_path, CELERY_BROKER_URL=dead_broker)
    processes.append(api)
    _, raw = token_create(user=alice, name="outage-agent")
    answered: list[str] = []
    mission_ids: list[int] = []
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30) as client:

        def call(path: str, body: dict | None = None) -> dict:
            response = client.post(path, json=body) if body is not None else client.post(path)
            assert response.status_code in (200, 201), response.text
            answered.append(path)
            return response.json()

        for m in range(3):
            mission = call("missions", {"title": f"Quest {m}", "objective": "o", "constraints": ["Never email before Friday"]})
            mission_ids.append(mission["id"])
            run = call(f"missions/{mission['id']}/runs", {"agent": "outage"})["run"]
            for i in range(4):
                call(f"runs/{run['id']}/records", {"kind": "decision", "text": f"decision {m}.{i}"})
            op = call(f"runs/{run['id']}/operations", {"key": "k", "kind": "email", "target": "t", "request": {}})
            call(f"operations/{op['id']}/attempt")
            call(f"operations/{op['id']}/complete", {"external_id": "E1", "external_status": "sent"})
            call(f"runs/{run['id']}/records", {"kind": "open_question", "text": f"last question {m}"})

    assert len(answered) == 3 * 10
    assert "not published; the sweep will retry it" in api.output()
    # Fast without a clock: a publish that waited on the dead broker would sleep between kombu's
    # connection retries (seconds each); one that fails fast never sleeps, however loaded the machine.
    assert [line for line in api.output().splitlines() if SLEPT in line] == []
    for mission_id in mission_ids:
        assert list(SnapshotRequest.objects.filter(mission_id=mission_id).values_list("status", "enqueued_at")) == [("pending", None)]
        assert background(mission_id) == []

    processes.append(Worker(tmp_path, "after-outage", beat=True, QUESTLOG_SNAPSHOT_SWEEP_INTERVAL="1"))
    wait_for(lambda: all(open_requests(m) == 0 for m in mission_ids), 45, "every snapshot after the outage")
    for m, mission_id in enumerate(mission_ids):
        snapshots = background(mission_id)
        assert len(snapshots) == 1
        state, _ = checkpoint_documents(snapshots[0])
        assert [d["text"] for d in state["decisions"]] == [f"decision {m}.{i}" for i in range(4)]
        assert [q["text"] for q in state["open_questions"]] == [f"last question {m}"]
        assert state["operations"][0]["status"] == "completed"
