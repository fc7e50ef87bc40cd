"""The storage engine's choice, measured (issue 20): the agent checkpoint's database work as one
statement of data-modifying CTEs, as the same steps one statement at a time, and as the same steps
sent in psycopg's pipeline (one sync). All three run on Django's connection with server-side
binding and prepared statements, inside a transaction, against the same mission.

    .venv/bin/python bench/bench_engine_options.py     (BENCH_QUICK=1 for a smoke run)"""

import os
import sys
import uuid

import common

common.setup()

from django.db import connection, transaction  # noqa: E402
from rounds import rounds, show  # noqa: E402

from checkpoints import refmaps  # noqa: E402
from quests.engine import checkpoints as engine_checkpoints, runner, writes  # noqa: E402
from quests.engine.sql import checkpoints as checkpoints_sql  # noqa: E402
from quests.services import missions, runs, savestate  # noqa: E402
from quests.services.audit import Actor  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS, SAMPLES = (2, 20) if QUICK else (6, 100)


def _row(mission, state) -> engine_checkpoints.CheckpointRow:
    refs, contents = savestate.storage.parts(state)
    return engine_checkpoints.CheckpointRow(
        mission_id=mission.pk,
        run_id=None,
        parent_id=mission.head_checkpoint_id,
        seq=mission.next_checkpoint_seq,
        trigger="agent",
        hash=uuid.uuid4().hex,
        note="",
        state_refs={},
        agent_layout=refmaps.agent_layout(refs, None),
        record_watermark=0,
        size_bytes=0,
        agent_state_bytes=0,
        compaction_report={},
        blobs=contents,
        archived_blobs={},
        archived_previews={},
        mission_state_refs={},
        mission_state_report={},
    )


def _params(row: engine_checkpoints.CheckpointRow, run_id: int, owner_id: int) -> dict:
    return {
        "now": runner.now(),
        "beat_run_id": run_id,
        "mission_id": row.mission_id,
        "run_id": row.run_id,
        "parent_id": row.parent_id,
        "seq": row.seq,
        "trigger": "agent",
        "hash": row.hash,
        "note": "",
        "state_map_id": refmaps.map_sha({}),
        "agent_map_id": row.agent_layout.base,
        "agent_delta": runner.json_text(row.agent_layout.delta),
        "record_watermark": 0,
        "size_bytes": 0,
        "agent_state_bytes": 0,
        "compaction_report": "{}",
        "new_bytes": 0,
        "mission_state_refs": "{}",
        "mission_state_report": "{}",
        "key": uuid.uuid4().hex,
        "key_scope": f"m{row.mission_id}:bench",
        "request_hash": "0" * 64,
        "key_owner_id": owner_id,
    }


def steps_one_by_one(row: engine_checkpoints.CheckpointRow, run_id: int, owner_id: int, *, pipeline: bool) -> None:
    """The SQLite form on PostgreSQL: beat, blobs (one insert each), row, key, head."""
    beat, blob, store_map, _, insert, remember, move = checkpoints_sql.CHECKPOINT_WRITE_SQLITE
    params = _params(row, run_id, owner_id)
    maps = {params["state_map_id"]: {}, **row.agent_layout.new_maps}
    with runner.cursor() as c:

        def run_all():
            c.execute(beat, params)
            for sha, data in row.blobs.items():
                c.execute(blob, {**params, "sha": sha, "data": data, "media_type": "application/json"})
            for sha, refs in maps.items():
                c.execute(store_map, {"sha": sha, "refs": runner.json_text(refs)})
            c.execute(insert, params)

        if pipeline:
            with connection.connection.pipeline():
                run_all()
        else:
            run_all()
        checkpoint_id = c.fetchone()[0]
        after = {**params, "checkpoint_id": checkpoint_id}
        if pipeline:
            with connection.connection.pipeline():
                c.execute(remember, after)
                c.execute(move, after)
        else:
            c.execute(remember, after)
            c.execute(move, after)


def main() -> int:
    with common.bench_data():
        user = common.bench_user("options")
        actor = Actor(user=user)
        mission, _ = missions.mission_create(actor=actor, title="options", objective="measure")
        run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
        owner = mission.owner_id
        state = common.AgentState(keys=20, key_bytes=500, seed=1)

        def timed(form: str) -> float:
            current, _ = state.next()
            with transaction.atomic():
                mission.refresh_from_db(fields=["head_checkpoint", "next_checkpoint_seq"])
                row = _row(mission, current)
                start = common.time.perf_counter()
                if form == "cte":
                    engine_checkpoints.checkpoint_write(row, beat_run_id=run.pk, key=writes.Key("bench", uuid.uuid4().hex, "0" * 64), key_owner_id=owner)
                else:
                    steps_one_by_one(row, run.pk, owner, pipeline=form == "pipeline")
                return common.time.perf_counter() - start

        took = rounds({form: (lambda f: lambda: timed(f))(form) for form in ("cte", "steps", "pipeline")}, count=ROUNDS, samples=SAMPLES)
    print("\n== the agent checkpoint's writes (20 blobs of ~500 B offered, 1 new), on Django's connection, prepared")
    for form, label in (("cte", "one statement of CTEs"), ("steps", "the same steps one by one"), ("pipeline", "the same steps in psycopg's pipeline")):
        show(label, took[form])
    common.load_note()
    return 0


if __name__ == "__main__":
    sys.exit(main())
