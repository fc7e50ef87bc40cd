"""Background snapshot figures on PostgreSQL: snapshots per second for one worker with a ~20 KB
save state (the service alone, and a real Celery worker fed through Redis), and how the cost of
one snapshot grows with the size of the state and with the length of the mission's history.

    .venv/bin/python bench/bench_snapshots.py     (or `make bench`)

Environment: BENCH_DATABASE_URL (default: PostgreSQL database questlog_bench_d on 127.0.0.1) and
BENCH_BROKER_URL (default redis://127.0.0.1:6379/13; the worker part is skipped, with a note,
when Redis cannot be reached). Only the two Questlog queues of that Redis database are purged.
"""

import os
import statistics
import subprocess
import sys
import time
import uuid

os.environ.setdefault("DATABASE_URL", os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_d"))
BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/13")
os.environ["CELERY_BROKER_URL"] = BROKER_URL
# Every change may be snapshotted at once: the figure is the snapshot's cost, not the debounce.
os.environ["QUESTLOG_SNAPSHOT_INTERVAL"] = "0"

import common  # noqa: E402

common.setup()

from django.db import transaction  # noqa: E402

from checkpoints import services as storage  # noqa: E402
from checkpoints.models import Checkpoint, Record, SnapshotRequest  # noqa: E402
from quests.models import Mission  # noqa: E402
from quests.services import missions, operations, records, runs, snapshots  # noqa: E402
from quests.services.audit import Actor  # noqa: E402
from quests.services.locking import lock_mission  # noqa: E402
from quests.services.savestate import state_document  # noqa: E402

GOAL = 200.0  # snapshots/s for one worker, ~20 KB state
MISSIONS = 40
ROUNDS = 10  # each round changes every mission once, then snapshots it
SIZES_KB = (10, 20, 80, 320)  # asked for; the smallest a mission here gets is ~11 KB
HISTORIES = (0, 1_000, 10_000)
SAMPLES = 60


class Agent:
    def __init__(self, name: str) -> None:
        self.user = common.bench_user(name)
        self.actor = Actor(user=self.user)

    def mission(self, title: str, *, state_kb: int = 20) -> tuple[int, int]:
        """A mission whose save state (the checkpoint's state document) is about `state_kb` KB,
        made of what a working agent leaves behind: constraints, decisions, open questions,
        blockers, evidence, notes, raw tool outputs and an operation ledger; plus a ~20 KB agent
        state in an agent checkpoint, which background snapshots carry by reference."""
        mission, _ = missions.mission_create(
            actor=self.actor,
            title=title,
            objective="Find and book a venue for 12 people in May, within budget.",
            constraints=[f"Constraint {i}: never contact the client before Friday about item {i}." for i in range(5)],
        )
        run, _ = runs.run_start(actor=self.actor, mission_id=mission.pk, agent="bench")
        say = lambda kind, text, **kw: records.record_create(actor=self.actor, run_id=run.pk, kind=kind, text=text, **kw)  # noqa: E731
        for kind, count in (("open_question", 3), ("blocker", 1), ("dependency", 2), ("evidence", 4)):
            for i in range(count):
                say(kind, f"{kind} {i}: " + " ".join(common.WORDS[(i + j) % len(common.WORDS)] for j in range(25)))
        for i in range(20):
            say("note", f"note {i}: " + " ".join(common.WORDS[(i * 3 + j) % len(common.WORDS)] for j in range(30)))
        for _ in range(3):
            say("tool_output", "search results " * 300)
        for i in range(8):
            op, _ = operations.operation_plan(
                actor=self.actor,
                run_id=run.pk,
                key=f"email-{i}",
                kind="email.send",
                target=f"venue-{i}@example.com",
                request={"subject": f"Quote request {i}", "body": "Could you send a quote for 12 people?"},
            )
            operations.operation_attempt(actor=self.actor, operation_id=op.pk)
            operations.operation_complete(actor=self.actor, operation_id=op.pk, external_id=f"msg-{i}", external_status="sent", receipt={"n": i})
        i = 0
        while state_bytes(mission.pk) < state_kb * 1000:
            say("decision", f"decision {i}: " + " ".join(common.WORDS[(i * 7 + j) % len(common.WORDS)] for j in range(40)), data={"i": i})
            i += 1
        records.checkpoint_create(actor=self.actor, run_id=run.pk, agent_state=common.AgentState(seed=mission.pk).state)
        snapshot_all([mission.pk])
        return mission.pk, run.pk


def state_bytes(mission_id: int) -> int:
    with transaction.atomic():
        document = state_document(lock_mission(mission_id))
        return len(storage.canonical_json(document))


def change(agent: Agent, run_id: int, n: int) -> None:
    """One change of save state, as an agent makes many: a note (which also pushes the oldest
    active note into the archive)."""
    records.record_create(actor=agent.actor, run_id=run_id, kind="note", text=f"progress note {n}: " + "checked the venue list again " * 6)


def pending_ids(mission_ids: list[int]) -> list[int]:
    return list(SnapshotRequest.objects.filter(mission_id__in=mission_ids, status="pending").values_list("pk", flat=True))


CPU: list[float] = []  # this process's CPU seconds per snapshot (the load on the machine aside)


def snapshot_all(mission_ids: list[int]) -> list[float]:
    """Run every pending request of these missions through the service; seconds for each."""
    took = []
    for request_id in pending_ids(mission_ids):
        start, cpu = time.perf_counter(), time.process_time()
        outcome = snapshots.snapshot_take(request_id=request_id)
        took.append(time.perf_counter() - start)
        CPU.append(time.process_time() - cpu)
        assert outcome in ("taken", "unchanged"), outcome
    return took


# ---- 1. one worker, ~20 KB state ------------------------------------------------------------------


def bench_service(agent: Agent, fleet: list[tuple[int, int]]) -> dict[str, float]:
    ids = [m for m, _ in fleet]
    took: list[float] = []
    CPU.clear()
    for r in range(ROUNDS):
        for _, run_id in fleet:
            change(agent, run_id, r)
        took += snapshot_all(ids)
    rate = len(took) / sum(took)
    print(f"\n== snapshots by the service, one process ({len(took)} snapshots of {len(ids)} missions, ~{state_bytes(ids[0]) // 1000} KB state each)")
    common.figure("snapshots/s (snapshots.snapshot_take)", rate)
    common.figure("p50 per snapshot", statistics.median(took) * 1000, "ms", ".2f")
    common.figure("p95 per snapshot", common.percentile(took, 95) * 1000, "ms", ".2f")
    cpu = statistics.median(CPU) * 1000
    common.figure("p50 CPU of this process per snapshot", cpu, "ms", ".2f")
    common.note(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return {"rate": rate, "p50": statistics.median(took) * 1000, "p95": common.percentile(took, 95) * 1000, "cpu": cpu}


def purge_queues() -> None:
    from config.celery import app

    with app.connection_for_write() as conn:
        for queue in ("snapshots", "maintenance"):
            try:
                conn.default_channel.queue_purge(queue)
            except conn.channel_errors:
                pass


def broker_reachable() -> bool:
    from config.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:
        return False


def bench_worker(agent: Agent, fleet: list[tuple[int, int]]) -> dict[str, float] | None:
    if not broker_reachable():
        common.note(f"worker figures skipped: no broker at {BROKER_URL}")
        return None
    ids = [m for m, _ in fleet]
    purge_queues()
    log = open(common.ROOT / "var" / "bench-snapshot-worker.log", "wb")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            "snapshots",
            "--pool",
            "solo",
            "-n",
            f"bench-{uuid.uuid4().hex[:6]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "WARNING",
        ],
        cwd=common.ROOT,
        env=os.environ.copy(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Warm-up round: the worker connects, imports and fills its caches.
        warm = worker_round(agent, fleet, ids, -1)
        assert warm is not None, "the worker did not start"
        seconds = 0.0
        for r in range(ROUNDS):
            took = worker_round(agent, fleet, ids, r)
            assert took is not None, "the worker stopped keeping up"
            seconds += took
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
    count = ROUNDS * len(ids)
    rate = count / seconds
    print(f"\n== snapshots by one Celery worker process (solo pool) fed through Redis ({count} snapshots)")
    common.figure("snapshots/s (publish after commit → worker → done)", rate)
    common.note(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return {"rate": rate}


def worker_round(agent: Agent, fleet: list[tuple[int, int]], ids: list[int], r: int) -> float | None:
    started: list[float] = []
    with transaction.atomic():
        # Registered first, so it runs first at commit: the clock starts as the messages go out.
        transaction.on_commit(lambda: started.append(time.perf_counter()))
        for _, run_id in fleet:
            change(agent, run_id, 1000 + r)
    deadline = time.perf_counter() + 60
    while SnapshotRequest.objects.filter(mission_id__in=ids).exclude(status="done").exists():
        if time.perf_counter() > deadline:
            return None
        time.sleep(0.02)  # polling harder would take CPU from the worker being measured
    return time.perf_counter() - started[0]


# ---- 2. cost by state size ------------------------------------------------------------------------


def bench_sizes(agent: Agent) -> dict[int, float]:
    print(f"\n== cost of one snapshot by size of the save state ({SAMPLES} snapshots each)")
    result = {}
    for kb in SIZES_KB:
        mission_id, run_id = agent.mission(f"size {kb} KB", state_kb=kb)
        took = []
        for n in range(SAMPLES):
            change(agent, run_id, n)
            took += snapshot_all([mission_id])
        actual = state_bytes(mission_id) // 1000
        result[actual] = statistics.median(took) * 1000
        common.figure(f"p50 per snapshot, {actual} KB state", result[actual], "ms", ".2f")
    return result


# ---- 3. cost by history length --------------------------------------------------------------------


def grow_history(mission_id: int, run_id: int, length: int) -> None:
    """`length` earlier checkpoints (a chain, as a long mission leaves) and `length` archived
    notes and raw tool outputs, bulk-written the way the services would have left them."""
    if not length:
        return
    mission = Mission.objects.get(pk=mission_id)
    head = mission.head_checkpoint
    fields = {f.attname: getattr(head, f.attname) for f in Checkpoint._meta.concrete_fields if not f.primary_key}
    seq = mission.next_checkpoint_seq
    texts = [f"old note {i} " + "archived words " * 20 for i in range(length)]
    with transaction.atomic():
        hashes, _ = storage.blobs_put([t.encode() for t in texts], media_type="text/plain")
    Record.objects.bulk_create(
        [
            Record(
                mission_id=mission_id, run_id=run_id, kind="note" if i % 2 else "tool_output", text=text[:60], blob_id=sha, archived=True, size_bytes=len(text)
            )
            for i, (text, sha) in enumerate(zip(texts, hashes))
        ],
        batch_size=1000,
    )
    parent = head
    for first in range(0, length, 1000):
        rows = [Checkpoint(**{**fields, "seq": seq + i, "trigger": "background"}) for i in range(first, min(first + 1000, length))]
        Checkpoint.objects.bulk_create(rows)
        for row in rows:
            row.parent_id, parent = parent.pk, row
        Checkpoint.objects.bulk_update(rows, ["parent"])
    Mission.objects.filter(pk=mission_id).update(head_checkpoint=parent, next_checkpoint_seq=seq + length)


def bench_history(agent: Agent) -> dict[int, float]:
    print(f"\n== cost of one snapshot by length of history (~20 KB state, {SAMPLES} snapshots each)")
    result = {}
    for length in HISTORIES:
        mission_id, run_id = agent.mission(f"history {length}")
        grow_history(mission_id, run_id, length)
        took = []
        for n in range(SAMPLES):
            change(agent, run_id, n)
            took += snapshot_all([mission_id])
        result[length] = statistics.median(took) * 1000
        common.figure(f"p50 per snapshot, {length} earlier checkpoints and {length} archived records", result[length], "ms", ".2f")
    return result


def main() -> None:
    with common.bench_data():
        agent = Agent("snapshots")
        fleet = [agent.mission(f"fleet {i}") for i in range(MISSIONS)]
        service = bench_service(agent, fleet)
        worker = bench_worker(agent, fleet)
        sizes = bench_sizes(agent)
        history = bench_history(agent)
    rows = [
        ("snapshots/s, service, ~20 KB state", f"{service['rate']:.0f}", f">= {GOAL:.0f}"),
        ("per snapshot p50 / p95", f"{service['p50']:.2f} / {service['p95']:.2f} ms", ""),
        ("CPU of the snapshotting process, p50", f"{service['cpu']:.2f} ms", ""),
        ("snapshots/s, one Celery worker via Redis", f"{worker['rate']:.0f}" if worker else "skipped", f">= {GOAL:.0f}"),
    ]
    rows += [(f"p50, {kb} KB state", f"{ms:.2f} ms", "") for kb, ms in sizes.items()]
    rows += [(f"p50, history {n}", f"{ms:.2f} ms", "") for n, ms in history.items()]
    common.table("background snapshots on PostgreSQL", rows)


if __name__ == "__main__":
    main()
