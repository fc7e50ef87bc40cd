"""Save-state engine figures on PostgreSQL: checkpoint writes per second (API and service), the
resume bundle's latency with a short and a long history, and the bytes a checkpoint costs when one
of twenty top-level keys of a ~20 KB agent state changes.

    .venv/bin/python bench/bench_engine.py        (or `make bench`, which runs every bench/bench_*.py)
"""

import json
import os
import time

import common

common.setup()

from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from checkpoints import refmaps, services as storage  # noqa: E402
from checkpoints.models import Checkpoint  # noqa: E402
from quests.models import Mission  # noqa: E402
from quests.services import bundle, missions, operations, records, runs  # noqa: E402
from quests.services.audit import Actor  # noqa: E402
from quests.services.savestate import state_document  # noqa: E402
from quests.services.tokens import token_create  # noqa: E402

WRITES = 300  # checkpoints timed per write path
ROUND = 25  # checkpoints per round; the paths take turns
SHORT_HISTORY = 10
LONG_HISTORY = 10_000
HISTORY_BATCH = 500
BUNDLE_SAMPLES = 200  # resume bundles timed per mission and path
STORAGE_CHECKPOINTS = 500
STORAGE_TABLES = ("checkpoints_checkpoint", "checkpoints_refmap", "checkpoints_blob")
BUNDLE_GOAL = 1.2


class Agent:
    """One user's agent: a bearer token for the API and the same identity for service calls."""

    def __init__(self, name: str) -> None:
        self.user = common.bench_user(name)
        token, raw = token_create(user=self.user, name=f"{name}-agent")
        self.actor = Actor(user=self.user, token=token)
        # The test client's default host is not in ALLOWED_HOSTS; a real agent talks to localhost.
        self.client = Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Bearer {raw}")

    def post(self, path: str, body: str):
        response = self.client.post(path, data=body, content_type="application/json")
        assert response.status_code in (200, 201), (path, response.status_code, response.content[:300])
        return response

    def get(self, path: str):
        response = self.client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.content[:300])
        return response

    def mission_with_run(self, title: str, *, constraints: int = 5) -> tuple[int, int]:
        mission, _ = missions.mission_create(
            actor=self.actor,
            title=title,
            objective="Find and book a venue for 12 people, within budget, before the end of the month.",
            constraints=[f"Constraint {i}: never contact the client before Friday about item {i}." for i in range(constraints)],
        )
        run, _ = runs.run_start(actor=self.actor, mission_id=mission.pk, agent="bench")
        return mission.pk, run.pk


# ---- 1. checkpoint writes per second -------------------------------------------------------------


def bench_writes(agent: Agent) -> dict[str, float]:
    _, api_run = agent.mission_with_run("Write throughput (API)")
    _, svc_run = agent.mission_with_run("Write throughput (service)")
    state = common.AgentState(seed=1)
    # Bodies and states are prepared up front: the figure is the server's cost, not the client's.
    bodies = [json.dumps({"agent_state": state.next()[0], "note": "step"}) for _ in range(WRITES + 20)]
    states = [state.next()[0] for _ in range(WRITES + 20)]
    path = f"/api/v1/runs/{api_run}/checkpoints"
    for body in bodies[:20]:  # warm-up: connection, caches, first-time blobs of every key
        agent.post(path, body)
    for agent_state in states[:20]:
        records.checkpoint_create(actor=agent.actor, run_id=svc_run, agent_state=agent_state, note="step")

    # Alternating rounds, so that load from elsewhere on the machine falls on both paths alike.
    api_seconds = service_seconds = 0.0
    for i in range(20, WRITES + 20, ROUND):
        start = time.perf_counter()
        for body in bodies[i : i + ROUND]:
            agent.post(path, body)
        api_seconds += time.perf_counter() - start
        start = time.perf_counter()
        for agent_state in states[i : i + ROUND]:
            records.checkpoint_create(actor=agent.actor, run_id=svc_run, agent_state=agent_state, note="step")
        service_seconds += time.perf_counter() - start
    api, service = WRITES / api_seconds, WRITES / service_seconds

    print(
        f"\n== checkpoint writes ({WRITES} each, in alternating rounds of {ROUND}, ~{state.size() // 1000} KB agent state of 20 keys, one key changed per checkpoint)"
    )
    common.figure("checkpoint writes/s (API, POST /api/v1/runs/{id}/checkpoints)", api)
    common.figure("checkpoint writes/s (service, records.checkpoint_create)", service)
    common.figure("API / service throughput ratio", api / service, fmt=".2f")
    common.load_note()
    return {"api": api, "service": service}


# ---- 2. resume bundle latency --------------------------------------------------------------------


def live_state(agent: Agent, run_id: int) -> None:
    """The same live state on every mission: records of each kind, some resolved, a ledger."""
    for kind, count in (("decision", 4), ("open_question", 3), ("blocker", 1), ("dependency", 2), ("evidence", 3), ("note", 6)):
        for i in range(count):
            records.record_create(actor=agent.actor, run_id=run_id, kind=kind, text=f"{kind} {i}: details of what the agent settled.", data={"i": i})
    for i in range(2):
        question, _ = records.record_create(actor=agent.actor, run_id=run_id, kind="open_question", text=f"Resolved question {i}?")
        records.record_create(actor=agent.actor, run_id=run_id, kind="decision", text=f"Answer {i}.", resolves=question.pk)
    records.record_create(actor=agent.actor, run_id=run_id, kind="tool_output", text="search results " * 400)
    for i in range(6):
        op, _ = operations.operation_plan(
            actor=agent.actor,
            run_id=run_id,
            key=f"email-{i}",
            kind="email.send",
            target=f"venue-{i}@example.com",
            request={"subject": f"Quote request {i}", "body": "Could you send a quote for 12 people?"},
        )
        if i < 5:
            operations.operation_attempt(actor=agent.actor, operation_id=op.pk)
            operations.operation_complete(actor=agent.actor, operation_id=op.pk, external_id=f"msg-{i}", external_status="sent", receipt={"n": i})


def build_history(mission_id: int, run_id: int, checkpoints: int) -> float:
    """Agent checkpoints, one key of the agent state changed in each. The first goes through the
    storage layer exactly as `take_checkpoint` writes it; the rest are bulk-created copies of that
    row with the agent-state refs, hash, sizes, seq and parent chain a real history would have (the
    changed part stored as a blob), because the service would take minutes for 10,000. The live
    state does not change while the history grows, so every row shares the state document."""
    state = common.AgentState(seed=2)
    start = time.perf_counter()
    with transaction.atomic():
        mission = Mission.objects.select_for_update().get(pk=mission_id)
        document = state_document(mission)
        template = storage.checkpoint_write(
            mission_id=mission_id,
            run_id=run_id,
            parent=mission.head_checkpoint,
            seq=mission.next_checkpoint_seq,
            trigger="agent",
            state=document,
            agent_state=state.state,
        )
    fields = {f.attname: getattr(template, f.attname) for f in Checkpoint._meta.concrete_fields if not f.primary_key}
    refs, layout = dict(template.agent_state_refs), template.agent_layout
    sizes = {key: len(storage.canonical_json(value)) for key, value in state.state.items()}
    parent, seq = template, template.seq + 1
    for first in range(1, checkpoints, HISTORY_BATCH):
        rows, contents = [], []
        for _ in range(min(HISTORY_BATCH, checkpoints - first)):
            agent_state, changed = state.next()
            content = storage.canonical_json(agent_state[changed])
            refs[changed], sizes[changed] = storage.sha256_hex(content), len(content)
            contents.append(content)
            layout = refmaps.agent_layout(refs, layout)
            rows.append(
                Checkpoint(
                    **{
                        **fields,
                        "seq": seq,
                        "agent_layout": layout,
                        "hash": storage.document_hash(template.state_refs, refs),
                        "agent_state_bytes": sum(sizes.values()),
                        "size_bytes": fields["size_bytes"] - fields["agent_state_bytes"] + sum(sizes.values()),
                        "new_bytes": len(content),
                    }
                )
            )
            seq += 1
        with transaction.atomic():
            storage.blobs_put(contents)
            Checkpoint.objects.bulk_create(rows)
            for row in rows:
                row.parent_id, parent = parent.pk, row
            Checkpoint.objects.bulk_update(rows, ["parent"])
    Mission.objects.filter(pk=mission_id).update(head_checkpoint=parent, next_checkpoint_seq=seq)
    return time.perf_counter() - start


def bench_bundle(agent: Agent) -> dict[str, float]:
    print(f"\n== resume bundle latency ({BUNDLE_SAMPLES} samples per mission and path, interleaved)")
    missions_by_history: dict[int, int] = {}
    for history in (SHORT_HISTORY, LONG_HISTORY):
        mission_id, run_id = agent.mission_with_run(f"Resume with {history} checkpoints")
        live_state(agent, run_id)
        seconds = build_history(mission_id, run_id, history)
        # The run ends as most runs do before a resume: the stop checkpoint is the head.
        runs.run_stop(actor=agent.actor, run_id=run_id, reason="blocked_external", detail="Waiting for venue replies.")
        common.note(f"wrote {history} checkpoints of history in {seconds:.1f} s (bulk-created rows, see build_history)")
        missions_by_history[history] = mission_id
    counts = {h: Checkpoint.objects.filter(mission_id=m).count() for h, m in missions_by_history.items()}
    common.note(f"checkpoints stored: {counts[SHORT_HISTORY]} and {counts[LONG_HISTORY]} (history plus the stop checkpoint)")

    samples: dict[tuple[str, int], list[float]] = {(p, h): [] for p in ("api", "service") for h in missions_by_history}
    mission_objects = {h: Mission.objects.get(pk=m) for h, m in missions_by_history.items()}
    bodies = {h: agent.get(f"/api/v1/missions/{m}/resume").json() for h, m in missions_by_history.items()}
    _check_comparable(bodies)
    for i in range(BUNDLE_SAMPLES + 20):
        for history, mission_id in missions_by_history.items():
            api = common.timed(agent.get, f"/api/v1/missions/{mission_id}/resume")
            service = common.timed(bundle.resume_bundle, mission_objects[history])
            if i >= 20:  # the first rounds warm caches and are not counted
                samples["api", history].append(api)
                samples["service", history].append(service)

    figures: dict[str, float] = {}
    for path, label in (("api", "API, GET /api/v1/missions/{id}/resume"), ("service", "service, bundle.resume_bundle")):
        for history in missions_by_history:
            p50 = common.percentile(samples[path, history], 50) * 1000
            p95 = common.percentile(samples[path, history], 95) * 1000
            figures[f"{path}_p50_{history}"] = p50
            figures[f"{path}_p95_{history}"] = p95
            common.figure(f"resume bundle p50 ({label}, {history} checkpoints)", p50, "ms", ".2f")
            common.figure(f"resume bundle p95 ({label}, {history} checkpoints)", p95, "ms", ".2f")
        ratio = figures[f"{path}_p50_{LONG_HISTORY}"] / figures[f"{path}_p50_{SHORT_HISTORY}"]
        figures[f"{path}_ratio"] = ratio
        common.figure(f"resume bundle p50 ratio ({path}, {LONG_HISTORY} / {SHORT_HISTORY} checkpoints)", ratio, f"(goal <= {BUNDLE_GOAL})", ".2f")
    common.load_note()
    return figures


LIVE_SECTIONS = ("constraints", "decisions", "open_questions", "blockers", "dependencies", "milestones", "approvals")


def _check_comparable(bodies: dict[int, dict]) -> None:
    """Only the history may differ between the two missions: their bundles carry the same live state."""

    def shape(body: dict) -> dict:
        counts = {section: len(body[section]) for section in LIVE_SECTIONS}
        return {**counts, **{f"operations.{g}": len(ops) for g, ops in body["operations"].items()}}

    short, long = shape(bodies[SHORT_HISTORY]), shape(bodies[LONG_HISTORY])
    assert short == long, f"live state differs: {short} vs {long}"
    sizes = [len(json.dumps(bodies[h])) for h in (SHORT_HISTORY, LONG_HISTORY)]
    common.note(f"same live state in both bundles: {short}; bundle sizes {sizes[0]} and {sizes[1]} bytes")


# ---- 3. bytes stored per checkpoint --------------------------------------------------------------


def relation_sizes() -> dict[str, dict[str, int]]:
    """Per table: heap, TOAST and index bytes (pg_total_relation_size is their sum)."""
    sizes = {}
    with connection.cursor() as cursor:
        for table in STORAGE_TABLES:
            cursor.execute(
                "SELECT pg_relation_size(c.oid), COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0),"
                " pg_indexes_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass",
                [table],
            )
            heap, toast, indexes, total = cursor.fetchone()
            sizes[table] = {"heap": heap, "toast": toast, "indexes": indexes, "total": total}
    return sizes


def checkpoint_row_sizes(ids: list[int]) -> dict[str, float]:
    columns = ("agent_delta", "compaction_report")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT avg(pg_column_size(c.*)), {', '.join(f'avg(pg_column_size({col}))' for col in columns)} FROM checkpoints_checkpoint c WHERE id = ANY(%s)",
            [ids],
        )
        values = [float(v) for v in cursor.fetchone()]
    return dict(zip(("row", *columns), values))


def bench_storage(agent: Agent) -> dict[str, float]:
    print(f"\n== bytes stored per checkpoint ({STORAGE_CHECKPOINTS} checkpoints, one of 20 top-level keys changed each)")
    with connection.cursor() as cursor:
        # Space freed by earlier deletions would be reused and hide the growth being measured.
        cursor.execute(f"VACUUM FULL {', '.join(STORAGE_TABLES)}")
    _, run_id = agent.mission_with_run("Storage per checkpoint")
    state = common.AgentState(seed=3)
    records.checkpoint_create(actor=agent.actor, run_id=run_id, agent_state=state.state)  # every key stored once
    before = relation_sizes()
    changed_sizes, new_bytes, ids = [], [], []
    for _ in range(STORAGE_CHECKPOINTS):
        agent_state, changed = state.next()
        checkpoint, _ = records.checkpoint_create(actor=agent.actor, run_id=run_id, agent_state=agent_state)
        changed_sizes.append(state.size(changed))
        new_bytes.append(checkpoint.new_bytes)
        ids.append(checkpoint.pk)
    after = relation_sizes()
    row = checkpoint_row_sizes(ids)

    changed_key = sum(changed_sizes) / len(changed_sizes)
    goal = 2 * changed_key + 1024
    logical = sum(new_bytes) / len(new_bytes)
    growth = {t: {part: (after[t][part] - before[t][part]) / STORAGE_CHECKPOINTS for part in after[t]} for t in STORAGE_TABLES}
    physical = sum(g["total"] for g in growth.values())
    common.figure("agent state size", state.size(), "bytes", ".0f")
    common.figure("changed key size (canonical JSON, mean)", changed_key, "bytes", ".0f")
    common.figure("bytes stored per checkpoint (logical, Checkpoint.new_bytes mean)", logical, "bytes", ".0f")
    common.figure(
        "bytes stored per checkpoint (physical, pg_total_relation_size growth of checkpoint + blob tables / N)",
        physical,
        "bytes",
        ".0f",
    )
    for table in STORAGE_TABLES:
        g = growth[table]
        common.note(f"{table}: heap {g['heap']:.0f} + toast {g['toast']:.0f} + indexes {g['indexes']:.0f} = {g['total']:.0f} bytes per checkpoint")
    common.figure("checkpoint row (pg_column_size, mean)", row["row"], "bytes", ".0f")
    common.note(f"of which agent_delta {row['agent_delta']:.0f}, compaction_report {row['compaction_report']:.0f} (as stored, after any compression)")
    common.figure("goal (2 x changed key + 1 KB)", goal, "bytes", ".0f")
    common.figure("physical bytes per checkpoint within goal", "yes" if physical <= goal else "NO")
    return {"changed_key": changed_key, "logical": logical, "physical": physical, "goal": goal, "row": row["row"]}


def main() -> None:
    with common.bench_data():
        agent = Agent("engine")
        with common.phase("writes"):
            writes = bench_writes(agent)
        with common.phase("storage"):
            s = bench_storage(agent)
        with common.phase("resume bundle"):
            b = bench_bundle(agent)
    common.table(
        "save-state engine on PostgreSQL",
        [
            ("checkpoint writes/s, API", f"{writes['api']:.1f}", ""),
            ("checkpoint writes/s, service", f"{writes['service']:.1f}", ""),
            ("API / service", f"{writes['api'] / writes['service']:.2f}", ""),
            (
                f"resume p50 API, {SHORT_HISTORY} / {LONG_HISTORY} checkpoints",
                f"{b[f'api_p50_{SHORT_HISTORY}']:.2f} / {b[f'api_p50_{LONG_HISTORY}']:.2f} ms",
                "",
            ),
            (
                f"resume p95 API, {SHORT_HISTORY} / {LONG_HISTORY} checkpoints",
                f"{b[f'api_p95_{SHORT_HISTORY}']:.2f} / {b[f'api_p95_{LONG_HISTORY}']:.2f} ms",
                "",
            ),
            ("resume p50 ratio, API", f"{b['api_ratio']:.2f}", f"<= {BUNDLE_GOAL}"),
            (
                f"resume p50 service, {SHORT_HISTORY} / {LONG_HISTORY} checkpoints",
                f"{b[f'service_p50_{SHORT_HISTORY}']:.2f} / {b[f'service_p50_{LONG_HISTORY}']:.2f} ms",
                "",
            ),
            ("resume p50 ratio, service", f"{b['service_ratio']:.2f}", f"<= {BUNDLE_GOAL}"),
            ("changed key per checkpoint", f"{s['changed_key']:.0f} B", ""),
            ("bytes/checkpoint, logical (new_bytes)", f"{s['logical']:.0f} B", f"<= {s['goal']:.0f} B"),
            ("checkpoint row itself (pg_column_size)", f"{s['row']:.0f} B", ""),
            ("bytes/checkpoint, physical (tables)", f"{s['physical']:.0f} B", f"<= {s['goal']:.0f} B"),
            (f"load average at the end ({os.cpu_count()} CPUs)", f"{os.getloadavg()[0]:.1f}", ""),
        ],
    )


if __name__ == "__main__":
    main()
