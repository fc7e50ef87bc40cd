"""Query budgets of the agent's hot path, through the API with token auth (issue 10).

Each call is measured against a mission that holds a few objects and against one that holds
1,000 live records (and hundreds of operations, milestones and approvals): the budget must hold
at both sizes, so the cost of a call never grows with what the mission holds. The tests run
outside a test-wide transaction, so the count is what production sends: every statement but the
BEGIN and COMMIT that psycopg issues itself."""

import uuid
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints.models import Operation, Record, RecordKind
from quests.models import Approval, Milestone, Mission

pytestmark = pytest.mark.django_db(transaction=True)

BUDGETS = {
    "heartbeat": 1,  # authentication with the beat
    "record": 3,  # authentication with the lock (the run, its mission, the key), the record, the save state
    # authentication with the lock (the operation or the run, its mission, the ledger chunk), the write
    "operation_plan": 2,
    "operation_attempt": 2,
    "operation_complete": 2,
    "operation_fail": 2,
    "checkpoint": 2,  # authentication with the read (the run, its mission, the key, the head), the write
    # … and the read of the notes a compaction pass archives, when the live notes outgrew the window
    "checkpoint_after_other_changes": 3,
    "resume": 8,
    "run_start": 5,  # authentication, the lock with the key, the start, the resume bundle (head, blobs)
    # authentication, the mission with its constraints, audit events and key (one statement), its
    # first save state with the snapshot request, the request marked published after commit, and
    # the answer's progress (its milestones counted)
    "mission_create": 5,
    # authentication with the lock (which reads the head's agent state the stop's checkpoint carries
    # over), the end (run, mission, audit events), the notification of a blocked mission with its
    # deliveries (one statement: quests.engine.outbox), the checkpoint
    "run_stop": 4,
    # … and a mission that ends with it: its retention policy, the pending approvals and milestones
    # it ends, and, after commit, its working state stamped with its expiry in one statement
    "run_complete": 9,
    # An approval's and a gated milestone's checkpoint refresh only the section their change
    # touches, never every section (issue 20): the budgets are the counts at both sizes. Each
    # authenticates with its lock, which also takes the blob writers' guard for the checkpoint and
    # reads the head's agent state it carries over, and notifies in one statement. An approval's section is read once: the approvals name their
    # checkpoint in the current document without reading them again.
    "approval_request": 10,
    "milestone_claim": 10,
}
AGENT_STATE = {f"k{i:02d}": {"text": "x" * 480, "n": i} for i in range(20)}


def key() -> str:
    return str(uuid.uuid4())


def fill(mission: Mission, run_id: int, live_records: int) -> None:
    """Give the mission `live_records` live records of every kind and a ledger, milestones and
    approvals in proportion, written in bulk; then rebuild its save state the slow, full way so
    the incremental path starts from the truth."""
    from quests.services.savestate import state_rebuild

    kinds = [RecordKind.DECISION, RecordKind.NOTE, RecordKind.EVIDENCE, RecordKind.OPEN_QUESTION, RecordKind.TOOL_OUTPUT]
    Record.objects.bulk_create(Record(mission=mission, run_id=run_id, kind=kinds[i % len(kinds)], text=f"record {i} " + "y" * 100) for i in range(live_records))
    extra = live_records // 5
    Operation.objects.bulk_create(
        Operation(mission=mission, run_id=run_id, key=f"op-{i}", request_hash="0" * 64, kind="email.send", target=f"t{i}", status="completed")
        for i in range(extra)
    )
    Milestone.objects.bulk_create(Milestone(mission=mission, kind="research_complete", title=f"Step {i}", review_status="approved") for i in range(extra // 4))
    now = timezone.now()
    Approval.objects.bulk_create(Approval(mission=mission, action=f"action {i}", status="approved", decided_at=now) for i in range(extra // 4))
    state_rebuild(mission.pk)


@pytest.fixture(params=[10, 1000], ids=["10-records", "1000-records"])
def working(request, agent, mission, run):
    """A running mission holding `param` live records; returns (agent, mission id, run id)."""
    fill(Mission.objects.get(pk=mission["id"]), run["id"], request.param)
    # Warm the path once (first-use work such as a snapshot request is part of any busy run).
    assert agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": AGENT_STATE, "key": key()}).status_code == 201
    return agent, mission["id"], run["id"]


TRANSACTION_STATEMENTS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


@pytest.fixture
def django_assert_max_num_queries():
    """pytest-django's fixture of that name, counting what the issue counts: every statement
    but the transaction's own (Django logs BEGIN and COMMIT as queries too)."""

    @contextmanager
    def at_most(budget: int):
        with CaptureQueriesContext(connection) as captured:
            yield captured
        statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(TRANSACTION_STATEMENTS)]
        listing = "\n".join(f"{n}. {sql[:400]}" for n, sql in enumerate(statements, 1))
        assert len(statements) <= budget, f"{len(statements)} queries, budget {budget}:\n{listing}"

    return at_most


def within(budget_name: str, django_assert_max_num_queries, call):
    with django_assert_max_num_queries(BUDGETS[budget_name]):
        response = call()
    assert response.status_code < 300, response.content
    return response.json()


def test_heartbeat(working, django_assert_max_num_queries):
    agent, _, run_id = working
    within("heartbeat", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/heartbeat"))


def test_record(working, django_assert_max_num_queries):
    agent, _, run_id = working
    for kind in ("decision", "note", "tool_output", "evidence"):
        within("record", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/records", {"kind": kind, "text": f"a {kind}", "key": key()}))


def test_operation_lifecycle(working, django_assert_max_num_queries):
    agent, _, run_id = working
    for outcome in ("complete", "fail"):
        op = within(
            "operation_plan",
            django_assert_max_num_queries,
            lambda: agent.post(
                f"runs/{run_id}/operations",
                {"key": f"send-{outcome}-{key()}", "kind": "email.send", "target": "client@example.com", "request": {"subject": "Hi"}},
            ),
        )
        within("operation_attempt", django_assert_max_num_queries, lambda: agent.post(f"operations/{op['id']}/attempt"))
        body = (
            {"external_id": "msg-1", "external_status": "sent", "receipt": {"ok": True}} if outcome == "complete" else {"error": "SMTP 451", "retryable": True}
        )
        within(f"operation_{outcome}", django_assert_max_num_queries, lambda: agent.post(f"operations/{op['id']}/{outcome}", body))


def test_checkpoint(working, django_assert_max_num_queries):
    agent, _, run_id = working
    for i in range(3):
        state = {**AGENT_STATE, "k00": {"text": f"changed {i}", "n": i}}
        within("checkpoint", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/checkpoints", {"agent_state": state, "key": key()}))


def test_checkpoint_after_other_changes(working, django_assert_max_num_queries):
    """The checkpoint's cost does not depend on what changed since the previous one."""
    agent, _, run_id = working
    agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Use the lake venue", "key": key()})
    agent.post(f"runs/{run_id}/records", {"kind": "note", "text": "Called the venue", "key": key()})
    agent.post(f"runs/{run_id}/operations", {"key": key(), "kind": "email.send", "target": "a@example.com", "request": {}})
    within(
        "checkpoint_after_other_changes",
        django_assert_max_num_queries,
        lambda: agent.post(f"runs/{run_id}/checkpoints", {"agent_state": AGENT_STATE, "key": key()}),
    )


def test_resume(working, django_assert_max_num_queries):
    agent, mission_id, _ = working
    bundle = within("resume", django_assert_max_num_queries, lambda: agent.get(f"missions/{mission_id}/resume"))
    assert bundle["checkpoint"]["agent_state"] == AGENT_STATE


def test_run_start(working, django_assert_max_num_queries):
    agent, mission_id, run_id = working
    agent.post(f"runs/{run_id}/stop", {"reason": "blocked_external", "detail": "CRM down"})
    answer = within("run_start", django_assert_max_num_queries, lambda: agent.post(f"missions/{mission_id}/runs", {"agent": "test", "key": key()}))
    assert answer["resume"]["checkpoint"]["agent_state"] == AGENT_STATE


def test_mission_create_costs_the_same_with_1_and_with_50_constraints(agent, django_assert_max_num_queries):
    """A mission's constraints and their audit events are arrays of one statement: the count of
    statements does not grow with them."""
    assert agent.post("missions", {"title": "Warm-up", "objective": "The token's first use is stamped once"}).status_code == 201
    counts = []
    for n in (1, 50):
        body = {"title": "Offsite", "objective": "Book it", "constraints": [f"Rule {i}" for i in range(n)], "key": key()}
        with django_assert_max_num_queries(BUDGETS["mission_create"]) as captured:
            answer = agent.post("missions", body)
        assert answer.status_code == 201, answer.content
        assert Mission.objects.get(pk=answer.json()["id"]).constraints.count() == n
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1]


def test_a_mission_without_constraints_is_made_with_its_document(agent, django_assert_max_num_queries):
    """A mission made without constraints is inserted with its current document (every section
    empty), equal to what a rebuild from its tables makes: its first record costs what any other
    does (but for its first snapshot request), instead of rebuilding the document from a dozen
    reads."""
    from quests.services.savestate import current_fields, state_rebuild

    made = agent.post("missions", {"title": "Offsite", "objective": "Book it", "key": key()})
    assert made.status_code == 201, made.content
    mission = Mission.objects.get(pk=made.json()["id"])
    assert current_fields(mission) == current_fields(state_rebuild(mission.pk))
    run_id = agent.post(f"missions/{mission.pk}/runs", {"agent": "test", "key": key()}).json()["run"]["id"]
    # The first write of a mission also marks its first snapshot request published, once.
    for text, budget in (("the first record", BUDGETS["record"] + 1), ("the second", BUDGETS["record"])):
        with django_assert_max_num_queries(budget):
            answer = agent.post(f"runs/{run_id}/records", {"kind": "note", "text": text, "key": key()})
        assert answer.status_code == 201, answer.content


def test_run_stop(working, django_assert_max_num_queries):
    agent, _, run_id = working
    within("run_stop", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/stop", {"reason": "blocked_external", "detail": "CRM down"}))


def test_run_complete(working, django_assert_max_num_queries):
    agent, _, run_id = working
    within("run_complete", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/stop", {"reason": "completed", "detail": "Booked"}))


def test_approval_request(working, django_assert_max_num_queries):
    agent, _, run_id = working
    body = {"action": "book the venue", "payload": {"deposit": 500}, "reason": "a deposit", "key": key()}
    within("approval_request", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/approvals", body))


def test_gated_milestone_claim(working, django_assert_max_num_queries):
    agent, _, run_id = working
    body = {"kind": "research_complete", "title": "Found three venues", "gate": True, "key": key()}
    within("milestone_claim", django_assert_max_num_queries, lambda: agent.post(f"runs/{run_id}/milestones", body))


def test_a_checkpoint_sends_only_the_parts_its_head_lacks(working, monkeypatch):
    """The head's agent-state parts exist already: an unchanged part is not sent again. (The
    blobs travel as one array parameter of the engine's write, so what is sent is read there.)"""
    from checkpoints.services import canonical_json, sha256_hex
    from quests.engine import checkpoints as engine_checkpoints

    sent: list[str] = []
    write = engine_checkpoints.checkpoint_write
    monkeypatch.setattr(engine_checkpoints, "checkpoint_write", lambda row, **kw: (sent.extend(row.blobs), write(row, **kw))[1])
    agent, _, run_id = working
    changed = {**AGENT_STATE, "k07": {"text": "only this changed", "n": 7}}
    assert agent.post(f"runs/{run_id}/checkpoints", {"agent_state": changed, "key": key()}).status_code == 201
    assert sha256_hex(canonical_json(changed["k07"])) in sent
    assert sha256_hex(canonical_json(AGENT_STATE["k01"])) not in sent


def test_a_checkpoint_stores_its_blobs_in_one_statement_under_one_lock(working):
    """Blobs: one `INSERT … ON CONFLICT DO NOTHING` and one blob writers' lock per checkpoint,
    also when records (a raw tool output among them) changed sections since the last one."""
    agent, _, run_id = working
    agent.post(f"runs/{run_id}/records", {"kind": "tool_output", "text": "raw " * 50, "key": key()})
    agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Lakeside", "key": key()})
    changed = {**AGENT_STATE, "k03": {"text": "changed", "n": 3}}
    with CaptureQueriesContext(connection) as captured:
        assert agent.post(f"runs/{run_id}/checkpoints", {"agent_state": changed, "key": key()}).status_code == 201
    statements = [s for q in captured.captured_queries for s in q["sql"].split("; ")]
    assert sum('INSERT INTO "checkpoints_blob"' in s for s in statements) == 1
    assert sum("pg_advisory_xact_lock_shared" in s for s in statements) == 1
    assert all("ON CONFLICT DO NOTHING" in s for s in statements if 'INSERT INTO "checkpoints_blob"' in s)


SNAPSHOT_BUDGET = 6  # claim, lock, blobs, the row with the head, close the claim (+ the blob lock)


def test_a_background_snapshot_costs_the_same_whatever_the_mission_holds(working, django_assert_max_num_queries):
    """Background snapshots get the same saving: they copy the current refs, so their cost does
    not depend on how many records, operations, milestones and approvals the mission holds."""
    from checkpoints.models import SnapshotRequest
    from quests.services import snapshots

    agent, mission_id, run_id = working
    agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Use the lake venue", "key": key()})
    request = SnapshotRequest.objects.get(mission_id=mission_id, status="pending")
    SnapshotRequest.objects.filter(pk=request.pk).update(not_before=timezone.now())
    with django_assert_max_num_queries(SNAPSHOT_BUDGET):
        assert snapshots.snapshot_take(request_id=request.pk) == "taken"
