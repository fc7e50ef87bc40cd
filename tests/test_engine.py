"""The storage engine (quests/engine): each hot write is one statement on PostgreSQL, and the same
operations give the same results on SQLite (the last test runs this module there too)."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import Blob, Checkpoint, Record
from checkpoints.services import canonical_json, document_hash
from quests.models import AuditEvent, IdempotentRequest, Mission, Run

pytestmark = pytest.mark.django_db
STATE = {f"k{i}": {"text": "x" * 100, "n": i} for i in range(5)}


def engine_statements(captured) -> list[str]:
    """What the request sent besides authentication and the transaction's own statements."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")) and "quests_agenttoken" not in q["sql"]
    ]


def test_an_agent_checkpoint_is_stored_whole_and_moves_the_head(agent, run):
    answer = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE, "note": "first", "key": "cp-1"})
    assert answer.status_code == 201, answer.content
    checkpoint = Checkpoint.objects.get(pk=answer.json()["id"])
    mission = Mission.objects.get(pk=run["mission_id"])
    assert mission.head_checkpoint_id == checkpoint.pk and mission.next_checkpoint_seq == checkpoint.seq + 1
    assert mission.state_pending == {}
    assert checkpoint.hash == document_hash(checkpoint.state_refs, checkpoint.agent_state_refs)
    stored = {sha: bytes(data) for sha, data in Blob.objects.filter(sha256__in=checkpoint.agent_state_refs.values()).values_list("sha256", "data")}
    assert {key: stored[sha] for key, sha in checkpoint.agent_state_refs.items()} == {k: canonical_json(v) for k, v in STATE.items()}
    assert checkpoint.new_bytes > 0 and checkpoint.note == "first" and checkpoint.run_id == run["id"]
    assert Run.objects.get(pk=run["id"]).heartbeat_at >= checkpoint.created_at


def test_the_second_checkpoint_counts_only_the_bytes_it_stored(agent, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE})
    changed = {**STATE, "k0": {"text": "changed", "n": 0}}
    second = Checkpoint.objects.get(pk=agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": changed}).json()["id"])
    assert second.new_bytes == len(canonical_json(changed["k0"]))
    assert second.parent_id is not None


def test_a_key_replays_its_checkpoint_and_refuses_another_body(agent, run):
    first = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE, "key": "same"})
    again = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE, "key": "same"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"other": 1}, "key": "same"})
    assert other.status_code == 409 and other.json()["error"]["code"] == "key_reuse"
    # The owner rule: the key is kept under the mission owner's account, in the mission's scope.
    row = IdempotentRequest.objects.get(key="same")
    assert (row.owner_id, row.scope) == (Mission.objects.get(pk=run["mission_id"]).owner_id, f"m{run['mission_id']}:checkpoints")


def test_a_fenced_run_writes_nothing(agent, run):
    assert agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "waiting"}).status_code == 200
    before = Checkpoint.objects.count()
    refused = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_ended"
    assert Checkpoint.objects.count() == before


def test_another_users_run_is_not_found(bob_agent, run):
    assert bob_agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE}).status_code == 404
    assert bob_agent.post(f"runs/{run['id']}/heartbeat").status_code == 404


def test_a_record_resolves_another_and_archives_raw_output(agent, run):
    question = agent.post(f"runs/{run['id']}/records", {"kind": "open_question", "text": "Which venue?", "key": "q"}).json()
    answer = agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": "The lake", "resolves": question["id"]}).json()
    resolved = Record.objects.get(pk=question["id"])
    assert resolved.resolved and resolved.resolved_by_id == answer["id"]
    assert agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "x", "resolves": 999999}).status_code == 422
    output = agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": "raw " * 400}).json()
    record = Record.objects.get(pk=output["id"])
    assert record.archived and bytes(Blob.objects.get(pk=record.blob_id).data) == ("raw " * 400).encode()
    again = agent.post(f"runs/{run['id']}/records", {"kind": "open_question", "text": "Which venue?", "key": "q"})
    assert again.status_code == 200 and again.json()["id"] == question["id"]


def test_a_run_start_is_replayed_by_its_key_and_audited(agent, mission):
    first = agent.post(f"missions/{mission['id']}/runs", {"agent": "a", "key": "start-1"})
    again = agent.post(f"missions/{mission['id']}/runs", {"agent": "a", "key": "start-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    run_id = first.json()["run"]["id"]
    stored = Mission.objects.get(pk=mission["id"])
    assert (stored.active_run_id, stored.status, stored.run_count) == (run_id, "running", 1)
    assert set(AuditEvent.objects.filter(mission_id=mission["id"], action__in=["start", "start_run"]).values_list("entity", "entity_id")) == {
        ("run", run_id),
        ("mission", mission["id"]),
    }


def test_a_heartbeat_beats_a_live_run_only(agent, run):
    before = Run.objects.get(pk=run["id"]).heartbeat_at
    assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert Run.objects.get(pk=run["id"]).heartbeat_at > before
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 409


@pytest.mark.skipif(connection.vendor != "postgresql", reason="statement counts are PostgreSQL's")
def test_each_hot_write_is_one_statement_after_its_lock(agent, run):
    """Checkpoint: the read (which authenticates the token too), then the write, and nothing else:
    no BEGIN, no COMMIT. Heartbeat: one statement."""
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE, "key": uuid.uuid4().hex}).status_code == 201
    assert len(captured.captured_queries) == 2, [q["sql"] for q in captured.captured_queries]
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert len(engine_statements(captured)) == 1


@pytest.mark.skipif(os.environ.get("QUESTLOG_ENGINE_ON_SQLITE") == "1", reason="already on SQLite")
def test_the_same_engine_tests_pass_on_sqlite(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'engine.sqlite3'}", "QUESTLOG_ENGINE_ON_SQLITE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", __file__],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_postgresql_connections_prepare_the_engines_statements_unless_turned_off():
    from config.database import database_settings

    url = "postgres://questlog:questlog@127.0.0.1:5432/questlog"
    assert database_settings({}, url, may_pool=False)["OPTIONS"]["prepare_threshold"] == 0
    assert database_settings({"QUESTLOG_DB_PREPARE_THRESHOLD": "-1"}, url, may_pool=False)["OPTIONS"]["prepare_threshold"] is None
    assert "prepare_threshold" not in database_settings({}, "sqlite:///x.sqlite3", may_pool=False)["OPTIONS"]
