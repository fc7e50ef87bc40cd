"""The storage engine (quests/engine): each hot write is one statement on PostgreSQL, and the same
operations give the same results on SQLite (the last test runs this module there too)."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
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


def test_a_mission_is_created_with_its_constraints_in_order_audited_and_replayed_by_its_key(agent):
    from quests.services.savestate import state_document

    body = {"title": "Offsite", "objective": "Book it", "constraints": ["Budget 4k", "No Fridays", "Vegetarian menu"], "key": "create-1"}
    first = agent.post("missions", body)
    again = agent.post("missions", body)
    assert (first.status_code, again.status_code) == (201, 200), first.content
    assert again.json()["id"] == first.json()["id"]
    assert agent.post("missions", {**body, "title": "Another"}).json()["error"]["code"] == "key_reuse"
    mission = Mission.objects.get(pk=first.json()["id"])
    assert list(mission.constraints.order_by("id").values_list("text", "source")) == [(t, "user") for t in body["constraints"]]
    events = list(AuditEvent.objects.filter(mission=mission).order_by("id").values_list("entity", "entity_id", "action", "to_state", "data"))
    constraint_ids = list(mission.constraints.order_by("id").values_list("pk", flat=True))
    assert events == [("mission", mission.pk, "create", "ready", {})] + [
        ("constraint", pk, "add", "active", {"text": text}) for pk, text in zip(constraint_ids, body["constraints"])
    ]
    assert IdempotentRequest.objects.filter(scope="missions", key="create-1", object_id=mission.pk).count() == 1
    # Its first save state is the full rebuild, saved with a snapshot request.
    document = {name: canonical_json(value) for name, value in state_document(mission).items() if name not in ("mission", "archive")}
    assert {name: mission.state_pending[name].encode() for name in document} == document
    assert (mission.state_version, mission.snapshot_requests.filter(status="pending").count()) == (1, 1)


def test_a_run_stop_ends_the_run_moves_the_mission_and_writes_its_checkpoint(agent, run):
    answer = agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "CRM down"})
    assert answer.status_code == 200, answer.content
    stopped, mission = Run.objects.get(pk=run["id"]), Mission.objects.get(pk=run["mission_id"])
    assert (stopped.stop_reason, stopped.stop_detail, stopped.ended_at is not None) == ("blocked_external", "CRM down", True)
    assert (mission.status, mission.stop_reason, mission.stop_detail, mission.active_run_id) == ("blocked", "blocked_external", "CRM down", None)
    assert mission.head_checkpoint.trigger == "stop" and mission.head_checkpoint.run_id == run["id"]
    events = AuditEvent.objects.filter(mission=mission, action__in=["stop_blocked", "end"]).order_by("id")
    assert list(events.values_list("entity", "entity_id", "from_state", "to_state")) == [
        ("mission", mission.pk, "running", "blocked"),
        ("run", run["id"], "active", "blocked_external"),
    ]
    assert agent.post(f"runs/{run['id']}/stop", {"reason": "completed"}).status_code == 409


def test_a_heartbeat_beats_a_live_run_only(agent, run):
    before = Run.objects.get(pk=run["id"]).heartbeat_at
    assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    assert Run.objects.get(pk=run["id"]).heartbeat_at > before
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 409


def test_an_agent_token_is_read_with_its_user_as_the_orm_reads_them(alice):
    from django.contrib.auth import get_user_model

    from quests.engine import reads
    from quests.engine.sql import tokens as tokens_sql
    from quests.models import AgentToken
    from quests.services.tokens import hash_token, token_create, token_revoke

    # The statement's columns are each model's, in field order: a field added to either fails here.
    for columns, model in ((tokens_sql.TOKEN_COLUMNS, AgentToken), (tokens_sql.USER_COLUMNS, get_user_model())):
        assert [c.strip().split(".")[1] for c in columns.split(",")] == [f.column for f in model._meta.concrete_fields]
    token, raw = token_create(user=alice, name="engine read")
    read = reads.agent_token(hash_token(raw))
    expected = AgentToken.objects.select_related("user").get(pk=token.pk)
    assert read is not None
    assert [getattr(read, f.attname) for f in AgentToken._meta.concrete_fields] == [getattr(expected, f.attname) for f in AgentToken._meta.concrete_fields]
    assert [getattr(read.user, f.attname) for f in get_user_model()._meta.concrete_fields] == [
        getattr(expected.user, f.attname) for f in get_user_model()._meta.concrete_fields
    ]
    assert reads.agent_token(hash_token(raw + "x")) is None
    token_revoke(user=alice, token_id=token.pk)
    assert reads.agent_token(hash_token(raw)) is None


def test_the_resume_bundle_is_one_read_of_every_section(agent, run, alice):
    """The engine's resume bundle: each section's rows as the answer shows them, the head's agent
    state whole, the ledger grouped, the memory and standing decisions, on either database."""
    from quests.engine import reads
    from quests.models import MemoryItem

    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE})
    question = agent.post(f"runs/{run['id']}/records", {"kind": "open_question", "text": "Which venue?"}).json()
    agent.post(f"runs/{run['id']}/records", {"kind": "note", "text": "not in the bundle"})
    planned = agent.post(f"runs/{run['id']}/operations", {"key": "send-1", "kind": "email", "target": "client", "request": {"to": "c"}}).json()
    agent.post(f"operations/{planned['id']}/attempt")
    MemoryItem.objects.create(owner=alice, name="tone", value="brief", approved_at=Run.objects.get(pk=run["id"]).started_at)
    mission = Mission.objects.get(pk=run["mission_id"])
    rows = reads.resume_bundle(mission.pk, user_id=alice.pk, token_mission_id=None)
    assert rows is not None
    assert rows["mission"]["id"] == mission.pk and rows["mission"]["status"] == mission.status
    assert rows["checkpoint"]["id"] == mission.head_checkpoint_id and rows["agent_state"] == STATE
    assert list(rows["agent_state"]) == list(Checkpoint.objects.get(pk=mission.head_checkpoint_id).agent_state_refs)
    assert [r["id"] for r in rows["records"]] == [question["id"]] and rows["records"][0]["archived"] is False
    assert rows["records"][0]["created_at"] == Record.objects.get(pk=question["id"]).created_at
    (operation,) = rows["ledger"]
    assert operation["status"] == "attempted" and operation["request"] == {"to": "c"} and operation["external_id"] is None
    assert [c["text"] for c in rows["constraints"]] == ["Never email the client before Friday"]
    assert rows["milestones"] == [] and rows["approvals"] == [] and rows["standing_decisions"] == []
    assert rows["active_runs"] == [{"number": 1}] and rows["memory"][0]["value"] == "brief"
    # Out of reach: another account, or a token limited to another mission.
    assert reads.resume_bundle(mission.pk, user_id=alice.pk + 1, token_mission_id=None) is None
    assert reads.resume_bundle(mission.pk, user_id=alice.pk, token_mission_id=mission.pk + 1) is None
    body = agent.get(f"missions/{mission.pk}/resume").json()
    assert body["checkpoint"]["agent_state"] == STATE and body["next_action"] == "in_progress"
    assert [op["id"] for op in body["operations"]["to_reconcile"]] == [planned["id"]]


def test_the_langgraph_latest_tuple_is_the_same_as_the_listing(agent):
    """get_tuple (one thread and namespace, limit 1) is the engine's read; the general listing
    gives the same item, with its pending writes and channel values."""
    channels = {"a": {"type": "json", "data": {"n": 1}}, "b": {"type": "json", "data": [1, 2]}}
    ids = []
    for step in range(3):
        graph_id = f"1f0{step:013d}-abc"
        versions = {name: f"{step + 1:032d}.0" for name in channels}
        body = {
            "thread_id": "engine-thread",
            "checkpoint": {"v": 4, "id": graph_id, "ts": "2026-12-03T00:00:00+00:00", "channel_versions": versions, "versions_seen": {}},
            "metadata": {"step": step},
            "parent_checkpoint_id": ids[-1] if ids else None,
            "channels": {name: {"version": versions[name], "value": value} for name, value in channels.items()},
        }
        assert agent.post("langgraph/checkpoints", body).status_code == 201
        ids.append(graph_id)
    writes = [{"idx": 1, "channel": "a", "value": {"type": "json", "data": 2}}, {"idx": 0, "channel": "b", "value": {"type": "json", "data": 3}}]
    assert agent.post("langgraph/writes", {"thread_id": "engine-thread", "checkpoint_id": ids[-1], "task_id": "t1", "writes": writes}).status_code == 200
    for query in ("", f"&checkpoint_id={ids[1]}"):
        latest = agent.get(f"langgraph/checkpoints?thread_id=engine-thread&checkpoint_ns=&limit=1{query}").json()["items"]
        listed = agent.get(f"langgraph/checkpoints?thread_id=engine-thread&checkpoint_ns=&limit=3{query}").json()["items"]
        assert latest == listed[:1]
    latest = agent.get("langgraph/checkpoints?thread_id=engine-thread&checkpoint_ns=&limit=1").json()["items"][0]
    assert latest["checkpoint_id"] == ids[-1] and latest["channel_values"] == channels
    assert [w["idx"] for w in latest["pending_writes"]] == [0, 1]
    assert agent.get("langgraph/checkpoints?thread_id=no-such-thread&checkpoint_ns=&limit=1").json()["items"] == []


counted_on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="round trips are counted on PostgreSQL only: on SQLite the engine runs each call as its steps, by design (the SQLite run checks the results)",
)


@counted_on_postgresql
def test_the_resume_bundle_and_get_tuple_are_one_statement_each(agent, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE})
    with CaptureQueriesContext(connection) as captured:
        assert agent.get(f"missions/{run['mission_id']}/resume").status_code == 200
    assert len(engine_statements(captured)) == 1, engine_statements(captured)
    with CaptureQueriesContext(connection) as captured:
        assert agent.get("langgraph/checkpoints?thread_id=none&checkpoint_ns=&limit=1").status_code == 200
    # get_tuple's statement authenticates the token itself: one statement in all.
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"))]
    assert len(statements) == 1 and "quests_agenttoken" in statements[0], statements


@counted_on_postgresql
def test_each_hot_write_is_one_statement_after_its_lock(agent, run):
    """Checkpoint: the read (which authenticates the token too), then the write, and nothing else:
    no BEGIN, no COMMIT. Heartbeat: one statement, which authenticates the token too."""
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": STATE, "key": uuid.uuid4().hex}).status_code == 201
    assert len(captured.captured_queries) == 2, [q["sql"] for q in captured.captured_queries]
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/heartbeat").status_code == 200
    (statement,) = [q["sql"] for q in captured.captured_queries]
    assert "quests_agenttoken" in statement and "UPDATE quests_run" in statement


def _operation_calls(agent, run) -> list[tuple[str, str, dict]]:
    """Plan, attempt, complete, observe; and another plan, attempt and fail: every operation call."""
    first = agent.post(f"runs/{run['id']}/operations", {"key": "op-1", "kind": "mail", "target": "a@b", "request": {"n": 1}})
    second = agent.post(f"runs/{run['id']}/operations", {"key": "op-2", "kind": "mail", "target": "c@d", "request": {"n": 2.5}})
    assert (first.status_code, second.status_code) == (201, 201), first.content
    one, two = first.json()["id"], second.json()["id"]
    return [
        ("attempt", f"operations/{one}/attempt", {}),
        ("complete", f"operations/{one}/complete", {"external_id": "M-1", "external_status": "sent", "receipt": {"id": "M-1", "ok": True}}),
        ("observe", f"operations/{one}/observe", {"external_status": "bounced", "receipt": {"why": "full"}}),
        ("attempt", f"operations/{two}/attempt", {}),
        ("fail", f"operations/{two}/fail", {"error": "refused", "retryable": False}),
    ]


def test_each_operation_call_keeps_the_save_state_the_full_rebuild(agent, run):
    """The lock reads the ledger chunk, the write stores it: after every call the mission's
    current document equals the full rebuild, and the operation, its events, its audit events
    and the run's heartbeat are written."""
    from checkpoints.models import Operation, OperationEvent
    from tests.test_properties_savestate import current_refs, full_refs

    calls = _operation_calls(agent, run)
    mission = Mission.objects.get(pk=run["mission_id"])
    assert current_refs(mission) == full_refs(mission)
    for action, path, body in calls:
        before = Run.objects.get(pk=run["id"]).heartbeat_at
        answer = agent.post(path, body)
        assert answer.status_code == 200, answer.content
        mission = Mission.objects.get(pk=run["mission_id"])
        assert current_refs(mission) == full_refs(mission), action
        beaten = Run.objects.get(pk=run["id"]).heartbeat_at > before
        assert beaten == (action == "attempt"), action  # a receipt beats nothing
    one, two = Operation.objects.filter(mission_id=run["mission_id"]).order_by("id")
    assert (one.status, one.external_id, one.external_status, one.receipt) == ("completed", "M-1", "bounced", {"why": "full"})
    assert (two.status, two.error, two.retryable, two.attempts) == ("failed", "refused", False, 1)
    assert list(OperationEvent.objects.filter(operation=one).values_list("event", flat=True)) == ["planned", "attempted", "completed", "observed"]
    assert list(OperationEvent.objects.filter(operation=two).values_list("event", "error")) == [("planned", ""), ("attempted", ""), ("failed", "refused")]
    audited = AuditEvent.objects.filter(entity="operation", entity_id=one.pk).order_by("id")
    assert [(e.action, e.from_state, e.to_state, e.data) for e in audited] == [
        ("plan", "", "planned", {"key": "op-1"}),
        ("attempt", "planned", "attempted", {"key": "op-1"}),
        ("complete", "attempted", "completed", {"key": "op-1"}),
        ("observe", "completed", "completed", {"key": "op-1", "external_status_from": "sent", "external_status": "bounced"}),
    ]


def test_an_operation_key_replays_its_operation_and_refuses_another_request(agent, run):
    body = {"key": "op-1", "kind": "mail", "target": "a@b", "request": {"n": 1}}
    first = agent.post(f"runs/{run['id']}/operations", body)
    again = agent.post(f"runs/{run['id']}/operations", body)
    assert (first.status_code, again.status_code) == (201, 200) and again.json() == first.json()
    other = agent.post(f"runs/{run['id']}/operations", {**body, "request": {"n": 2}})
    assert other.status_code == 409 and other.json()["error"]["code"] == "key_reuse"
    receipt = {"external_id": "M-1", "external_status": "sent"}
    agent.post(f"operations/{first.json()['id']}/attempt")
    done = agent.post(f"operations/{first.json()['id']}/complete", receipt)
    assert agent.post(f"operations/{first.json()['id']}/complete", receipt).json() == done.json()  # the same receipt: a no-op


def test_an_operation_of_a_mission_the_caller_cannot_see_is_not_found(agent, run, django_user_model):
    from tests.conftest import ApiClient

    op = agent.post(f"runs/{run['id']}/operations", {"key": "op-1", "kind": "mail", "target": "a@b", "request": {}}).json()
    from quests.services.tokens import token_create

    _, raw = token_create(user=django_user_model.objects.create_user("mallory", password="x"), name="other")
    other = ApiClient(Client(), raw)
    assert other.post(f"operations/{op['id']}/attempt").status_code == 404
    assert other.post(f"runs/{run['id']}/operations", {"key": "op-2", "kind": "mail", "target": "a@b", "request": {}}).status_code == 404


@counted_on_postgresql
def test_each_operation_call_is_its_lock_and_one_write(agent, run):
    """Plan, attempt, complete, observe, fail: the lock (with the ledger chunk), which authenticates
    the agent's token too, then the write. Nothing else but the transaction's own statements."""

    def sent(captured) -> list[str]:
        return [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK"))]

    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run['id']}/operations", {"key": "op-0", "kind": "mail", "target": "a@b", "request": {}}).status_code == 201
    assert len(sent(captured)) == 2 and "quests_agenttoken" in sent(captured)[0], sent(captured)
    for action, path, body in _operation_calls(agent, run):
        with CaptureQueriesContext(connection) as captured:
            assert agent.post(path, body).status_code == 200
        assert len(sent(captured)) == 2 and "quests_agenttoken" in sent(captured)[0], (action, sent(captured))


@counted_on_postgresql
def test_a_mission_create_is_one_statement_and_its_save_state_another_whatever_its_constraints(agent):
    """The create (with the key's lookup), then the save state with the snapshot request (the
    request is marked published after commit, which a test's transaction never reaches), then
    the answer's count of milestones."""
    for n in (1, 50):
        with CaptureQueriesContext(connection) as captured:
            assert (
                agent.post("missions", {"title": "t", "objective": "o", "constraints": [f"r{i}" for i in range(n)], "key": uuid.uuid4().hex}).status_code == 201
            )
        assert len(engine_statements(captured)) == 3, engine_statements(captured)


@pytest.mark.long
@pytest.mark.skipif(
    os.environ.get("QUESTLOG_ENGINE_ON_SQLITE") == "1",
    reason="this test is the SQLite rerun's own starter: inside that rerun it would start the rerun again",
)
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
    options = database_settings({}, url, may_pool=False)["OPTIONS"]
    # Django's own queries once their text has run a few times (not a one-off migration's, which
    # may hold several commands); the engine's at their first run (the next test).
    assert options["prepare_threshold"] == 5 and options["server_side_binding"] is True
    assert database_settings({"QUESTLOG_DB_PREPARE_THRESHOLD": "-1"}, url, may_pool=False)["OPTIONS"]["prepare_threshold"] is None
    assert database_settings({"QUESTLOG_DB_SERVER_SIDE_BINDING": "0"}, url, may_pool=False)["OPTIONS"]["server_side_binding"] is False
    assert "prepare_threshold" not in database_settings({}, "sqlite:///x.sqlite3", may_pool=False)["OPTIONS"]


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite prepares nothing to look up (pg_prepared_statements is PostgreSQL's): skipped only in this module's SQLite rerun",
)
@pytest.mark.parametrize("threshold", [5, None])
def test_an_engine_statement_is_prepared_at_its_first_run_unless_preparing_is_off(threshold):
    from quests.engine import runner

    connection.ensure_connection()
    before = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = threshold
    try:
        statement = f"SELECT %(n)s::int + {uuid.uuid4().int % 10**9}"  # a text this connection never ran
        assert runner.fetch(statement, {"n": 1})
        with connection.cursor() as c:
            c.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [statement.replace("%(n)s", "$1")])
            prepared = c.fetchone()[0]
    finally:
        connection.connection.prepare_threshold = before
    assert prepared == (1 if threshold is not None else 0)


def test_psycopg_parses_each_statement_once_per_process():
    """psycopg keeps a statement's parse (its placeholders turned into $n, with their order) only for
    a text of at most 4,096 bytes with at most 50 parameters; past either it parses the statement
    again on every call (~1 ms of CPU for the LangGraph put's write, 4,140 bytes at first, on this loaded machine)."""
    import importlib
    import pkgutil
    import re

    from psycopg import _queries

    from quests.engine import sql

    modules = [importlib.import_module(f"{sql.__name__}.{found.name}") for found in pkgutil.iter_modules(sql.__path__)]
    assert len(modules) >= 9  # every module of statements, found by name (a new one is in the list)
    for module in modules:
        for name, text in vars(module).items():
            if name.endswith("_PG") and isinstance(text, str):
                assert len(text.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH, f"{module.__name__}.{name}: {len(text.encode())} bytes"
                assert len(set(re.findall(r"%\((\w+)\)s", text))) <= _queries.MAX_CACHED_STATEMENT_PARAMS, f"{module.__name__}.{name}"


def test_the_statements_that_count_a_request_stay_within_psycopgs_parse_cache():
    """An agent's request counted in the database's cache rides in the statement that authenticates
    it (quests.services.throttle.api_counting): the statement with the cache's upsert in it too."""
    import re

    from psycopg import _queries

    from config.cache import CountingDatabaseCache
    from quests.engine.sql import checkpoints, graph, ledger, runs, tokens
    from quests.engine.writes import _counted_statement as counted_statement

    cache = CountingDatabaseCache("questlog_cache", {})
    # Every counted form of every module, each with the row its count is taken from: a valid
    # token's (`COUNTED_CALLER_ROW_PG`) unless the statement names its own.
    own_rows = {
        tokens.AGENT_TOKEN_COUNTED_PG: tokens.COUNTED_TOKEN_ROW_PG,
        checkpoints.CHECKPOINT_KNOWN_WRITE_COUNTED_PG: checkpoints.KNOWN_COUNTED_ROW_PG,
        graph.GRAPH_PUT_KNOWN_WRITE_COUNTED_PG: checkpoints.KNOWN_COUNTED_ROW_PG,
    }
    counted = [
        (text, own_rows.get(text, tokens.COUNTED_CALLER_ROW_PG))
        for module in (runs, checkpoints, graph, ledger, tokens)
        for name, text in vars(module).items()
        if name.endswith("_COUNTED_PG") and isinstance(text, str)
    ]
    assert len(counted) >= 10, (
        counted
    )  # the token; the checkpoint's read and one-trip write; the run's, an operation's and a plan's locks; the beat; LangGraph's four
    for template, row in counted:
        text = counted_statement(template, cache.count_statement(row))  # as Count.fetch sends it
        assert len(text.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH, f"{len(text.encode())} bytes: {template[:80]}"
        assert len(set(re.findall(r"%\((\w+)\)s", text))) <= _queries.MAX_CACHED_STATEMENT_PARAMS
