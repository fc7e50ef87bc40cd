"""The resume bundle's read, measured in its possible forms (issue 20): one statement whose
sections come back as JSON aggregates (the engine's `RESUME_BUNDLE_PG`), the same sections as
typed rows sent in psycopg's pipeline (one sync), and the same sections one statement at a time.
All run on Django's connection with server-side binding and prepared statements, against one
mission with a head checkpoint of 20 keys, live records and a ledger of 10 operations.

    .venv/bin/python bench/bench_read_forms.py     (BENCH_QUICK=1 for a smoke run)"""

import os
import sys

import common

common.setup()

from django.db import connection, transaction  # noqa: E402
from rounds import rounds, show  # noqa: E402

from quests.engine import reads, runner  # noqa: E402
from quests.engine.sql import bundle as bundle_sql  # noqa: E402
from quests.services import missions, operations, records, runs  # noqa: E402
from quests.services.audit import Actor  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
ROUNDS, SAMPLES = (2, 20) if QUICK else (6, 100)


def sections_typed(params: dict, *, pipeline: bool) -> list[list[tuple]]:
    """Each section as its own statement, typed rows (the SQLite form, run on PostgreSQL)."""
    statements = bundle_sql.RESUME_BUNDLE_SQLITE[:-1]  # the agent state's step is SQLite's own JSON
    if not pipeline:
        with runner.cursor() as c:
            found = []
            for statement in statements:
                c.execute(statement, params)
                found.append(c.fetchall())
            return found
    # A cursor keeps one result: in the pipeline each statement gets its own.
    cursors = [runner.cursor() for _ in statements]
    with connection.connection.pipeline():
        for c, statement in zip(cursors, statements):
            c.execute(statement, params)
    found = [c.fetchall() for c in cursors]
    for c in cursors:
        c.close()
    return found


def main() -> int:
    with common.bench_data():
        user = common.bench_user("readforms")
        actor = Actor(user=user)
        mission, _ = missions.mission_create(actor=actor, title="read forms", objective="measure", constraints=["c1", "c2"])
        run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="bench")
        state = common.AgentState(keys=20, key_bytes=500, seed=1)
        records.checkpoint_create(actor=actor, run_id=run.pk, agent_state=state.next()[0])
        for i in range(5):
            records.record_create(actor=actor, run_id=run.pk, kind="open_question", text=f"q{i}")
        for i in range(10):
            operations.operation_plan(actor=actor, run_id=run.pk, key=f"op{i}", kind="email", target="t", request={"i": i})
        params = {"mission_id": mission.pk, "user_id": user.pk, "token_mission_id": None, "now": runner.now()}

        def timed(form: str) -> float:
            with transaction.atomic():
                start = common.time.perf_counter()
                if form == "json":
                    reads.resume_bundle(mission.pk, user_id=user.pk, token_mission_id=None)
                else:
                    sections_typed(runner.bound(params), pipeline=form == "pipeline")
                return common.time.perf_counter() - start

        took = rounds({form: (lambda f: lambda: timed(f))(form) for form in ("json", "pipeline", "steps")}, count=ROUNDS, samples=SAMPLES)
    print("\n== the resume bundle's read (11 sections, 20-key agent state, 10 operations), on Django's connection, prepared")
    for form, label in (
        ("json", "one statement, sections as JSON aggregates, rows made (engine)"),
        ("pipeline", "the sections as typed rows in psycopg's pipeline (rows only)"),
        ("steps", "the sections as typed rows one by one (rows only)"),
    ):
        show(label, took[form])
    common.load_note()
    return 0


if __name__ == "__main__":
    sys.exit(main())
