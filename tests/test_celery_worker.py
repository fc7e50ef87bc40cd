"""Background snapshots with real Celery workers (subprocesses) against Redis and the test
database: end to end, a worker killed in the middle of a snapshot, and a broker that is down
while an agent works. Every process a test starts is stopped by that test, by its pid."""

import re
from pathlib import Path

import httpx
import pytest

from checkpoints.models import Checkpoint, SnapshotRequest
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.services.tokens import token_create
from tests.process_probes import SLEPT, SNAPSHOT_HELD
from tests.processes import ApiServer, Worker, free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.long, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def clean_broker(empty_broker, settings) -> None:
    """Autouse, so the broker is empty before the fixtures that already publish (mission creation);
    snapshots are asked for after one second, so a test sees its worker take them."""
    settings.QUESTLOG_SNAPSHOT_INTERVAL = 1


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
