"""The resume bundle: its shape exactly as API.md, what drops out of it, and a cost that does not
grow with the length of the history."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quests.models import Mission
from quests.services import approvals, memory, milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.bundle import resume_bundle
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db

TOP_LEVEL = {
    "mission",
    "next_action",
    "message",
    "checkpoint",
    "last_verified_checkpoint",
    "constraints",
    "decisions",
    "open_questions",
    "blockers",
    "dependencies",
    "milestones",
    "approvals",
    "operations",
    "memory",
}
MISSION = {"id", "title", "objective", "status", "stop_reason", "stop_detail", "retry_at"}
CHECKPOINT = {"id", "seq", "hash", "verified", "trigger", "created_at", "agent_state"}
VERIFIED = {"id", "seq", "hash"}
CONSTRAINT = {"id", "text", "source", "created_at"}
RECORD = {"id", "kind", "text", "data", "resolved", "created_at"}
MILESTONE = {"id", "kind", "title", "review_status", "note"}
APPROVAL = {"id", "action", "payload", "reason", "status", "decided_payload", "note"}
OPERATION = {"id", "key", "kind", "target", "status", "attempts", "max_attempts", "external_id", "external_status", "receipt", "error"}


@pytest.fixture
def person(alice) -> Actor:
    return Actor(user=alice)


@pytest.fixture
def agent(alice) -> Actor:
    token, _ = token_create(user=alice, name="bundle-agent")
    return Actor(user=alice, token=token)


@pytest.fixture
def mission(agent) -> Mission:
    mission, _ = missions.mission_create(
        actor=agent,
        title="Offsite",
        objective="Book a venue",
        constraints=["Never email the client before Friday"],
        planned_milestones=[{"kind": "research_complete", "title": "Research"}],
    )
    return mission


def start(agent: Actor, mission: Mission):
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk)
    return run


def rich_history(agent: Actor, person: Actor, mission: Mission) -> None:
    """A mission with something in every section of the bundle."""
    run = start(agent, mission)
    for kind in ("decision", "open_question", "blocker", "dependency", "note", "evidence"):
        records.record_create(actor=agent, run_id=run.pk, kind=kind, text=f"a {kind}", data={"k": kind})
    for key, outcome in (("planned", None), ("attempted", "attempt"), ("completed", "complete"), ("failed", "fail")):
        op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key=key, kind="email", target="t", request={"n": key})
        if outcome:
            operations.operation_attempt(actor=agent, operation_id=op.pk)
        if outcome == "complete":
            operations.operation_complete(actor=agent, operation_id=op.pk, external_id="x", external_status="sent")
        if outcome == "fail":
            operations.operation_fail(actor=agent, operation_id=op.pk, error="boom", retryable=True)
    proposal, _ = memory.memory_propose(actor=agent, run_id=run.pk, name="seating", value="round tables", reason="r")
    memory.memory_decide(actor=person, proposal_id=proposal.pk, decision="approve")
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="Research", agent_state={"step": 1})
    milestones.milestone_review(actor=person, milestone_id=milestone.pk, action="approve")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 2})
    approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={"eur": 10}, reason="money")


def test_the_bundle_has_exactly_api_mds_shape(agent, person, mission):
    rich_history(agent, person, mission)
    b = resume_bundle(mission)
    assert TOP_LEVEL <= set(b)
    assert MISSION <= set(b["mission"])
    assert CHECKPOINT <= set(b["checkpoint"])
    assert VERIFIED <= set(b["last_verified_checkpoint"])
    assert set(b["operations"]) == {"completed", "to_reconcile", "planned", "failed"}
    for c in b["constraints"]:
        assert CONSTRAINT <= set(c)
    for section in ("decisions", "open_questions", "blockers", "dependencies"):
        assert len(b[section]) == 1, section
        assert RECORD <= set(b[section][0])
    assert MILESTONE <= set(b["milestones"][0])
    assert APPROVAL <= set(b["approvals"][0])
    for group in b["operations"].values():
        assert len(group) == 1
        assert OPERATION <= set(group[0])
    assert b["memory"] == [{"name": "seating", "value": "round tables"}]
    assert b["checkpoint"]["agent_state"] == {"step": 2}
    assert b["checkpoint"]["trigger"] == "approval"
    assert isinstance(b["message"], str) and b["message"]


def test_a_fresh_mission_has_an_empty_bundle(mission):
    b = resume_bundle(mission)
    assert b["checkpoint"] is None
    assert b["last_verified_checkpoint"] is None
    assert b["operations"] == {"completed": [], "to_reconcile": [], "planned": [], "failed": []}
    for section in ("decisions", "open_questions", "blockers", "dependencies", "milestones", "approvals", "memory"):
        assert b[section] == []
    assert [c["text"] for c in b["constraints"]] == ["Never email the client before Friday"]


def test_the_checkpoint_is_the_missions_head(agent, mission):
    run = start(agent, mission)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"a": 1})
    latest, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"a": 2})
    b = resume_bundle(mission)
    assert (b["checkpoint"]["id"], b["checkpoint"]["seq"], b["checkpoint"]["hash"]) == (latest.pk, latest.seq, latest.hash)
    assert b["checkpoint"]["agent_state"] == {"a": 2}


def test_the_last_verified_checkpoint_is_the_approved_milestones(agent, person, mission):
    run = start(agent, mission)
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="R")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"later": True})
    assert resume_bundle(mission)["last_verified_checkpoint"] is None
    milestones.milestone_review(actor=person, milestone_id=milestone.pk, action="approve")
    b = resume_bundle(mission)
    assert b["last_verified_checkpoint"]["id"] == milestone.checkpoint_id
    assert b["checkpoint"]["id"] != milestone.checkpoint_id
    assert b["checkpoint"]["verified"] is False


def test_resolved_records_drop_out(agent, mission):
    run = start(agent, mission)
    question, _ = records.record_create(actor=agent, run_id=run.pk, kind="open_question", text="Which venue?")
    blocker, _ = records.record_create(actor=agent, run_id=run.pk, kind="blocker", text="No budget")
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Lakeside", resolves=question.pk)
    b = resume_bundle(mission)
    assert b["open_questions"] == []
    assert [r["id"] for r in b["blockers"]] == [blocker.pk]
    assert [r["text"] for r in b["decisions"]] == ["Lakeside"]


def test_abandoned_records_drop_out(agent, person, mission):
    run = start(agent, mission)
    kept, _ = records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Kept")
    chosen, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={})
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Later")
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=chosen.pk)
    assert [r["text"] for r in resume_bundle(mission)["decisions"]] == ["Kept"]


def test_retired_constraints_drop_out_and_corrections_come_in(agent, person, mission):
    constraint = mission.constraints.get()
    missions.constraint_retire(actor=person, mission_id=mission.pk, constraint_id=constraint.pk)
    missions.constraint_add(actor=person, mission_id=mission.pk, text="Budget 5k")
    run = start(agent, mission)
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="Shortlist")
    milestones.milestone_review(actor=person, milestone_id=milestone.pk, action="correct", note="Near a station")
    assert [(c["text"], c["source"]) for c in resume_bundle(mission)["constraints"]] == [("Budget 5k", "user"), ("Near a station", "correction")]


def test_operations_are_grouped_oldest_first_across_runs(agent, mission):
    first = start(agent, mission)
    keys = []
    for i in range(3):
        op, _ = operations.operation_plan(actor=agent, run_id=first.pk, key=f"a{i}", kind="email", target="t", request={})
        operations.operation_attempt(actor=agent, operation_id=op.pk)
        operations.operation_complete(actor=agent, operation_id=op.pk, external_id=str(i), external_status="sent")
        keys.append(op.key)
    runs.run_stop(actor=agent, run_id=first.pk, reason="blocked_external")
    second = start(agent, mission)
    op, _ = operations.operation_plan(actor=agent, run_id=second.pk, key="b0", kind="email", target="t", request={})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="b", external_status="sent")
    assert [o["key"] for o in resume_bundle(mission)["operations"]["completed"]] == keys + ["b0"]


def test_in_progress_is_skipped_for_the_run_just_started(agent, mission):
    start(agent, mission)
    assert resume_bundle(mission)["next_action"] == "in_progress"
    assert resume_bundle(mission, for_new_run=True)["next_action"] == "resume"


def test_the_bundle_is_the_same_for_every_caller_shape(agent, mission):
    run = start(agent, mission)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"a": [1, 2]})
    assert resume_bundle(mission) == resume_bundle(Mission.objects.get(pk=mission.pk))


def _history(agent: Actor, mission: Mission, checkpoints: int) -> None:
    run = start(agent, mission)
    for i in range(checkpoints):
        records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": i, "static": "x" * 100})
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="d")


def _bundle_queries(mission: Mission) -> int:
    with CaptureQueriesContext(connection) as queries:
        resume_bundle(mission)
    return len(queries)


def test_the_bundles_query_count_does_not_grow_with_the_number_of_checkpoints(agent):
    short, _ = missions.mission_create(actor=agent, title="Short", objective="O", constraints=["c"])
    long, _ = missions.mission_create(actor=agent, title="Long", objective="O", constraints=["c"])
    _history(agent, short, 5)
    _history(agent, long, 200)
    assert Mission.objects.get(pk=long.pk).head_checkpoint.seq == 200
    assert _bundle_queries(long) == _bundle_queries(short)


def test_no_bundle_query_reads_the_checkpoint_history(agent, mission):
    _history(agent, mission, 20)
    with CaptureQueriesContext(connection) as queries:
        resume_bundle(mission)
    for query in queries:
        sql = query["sql"].lower()
        if 'from "checkpoints_checkpoint"' in sql:
            assert "where" in sql and ("limit" in sql or '"checkpoints_checkpoint"."id" =' in sql), sql


def test_a_persons_page_is_told_what_the_next_run_is_told(agent, person, alice, mission):
    """resume_summary (the mission page's sentence and live records) is the bundle's, in every state
    that changes the next action: ready, running, blocked with an operation to reconcile, waiting on
    an approval or a gate, paused, cancelled."""
    from quests.services.bundle import resume_summary
    from tests.builders import new_mission, verified_then_more_work, waiting_on_approval, waiting_on_gate

    def same(m: Mission) -> None:
        m = Mission.objects.get(pk=m.pk)
        bundle, summary = resume_bundle(m), resume_summary(m)
        # The summary's records are the bundle's own RecordOut, not yet dumped to plain dicts.
        dumped = {key: [r.model_dump() for r in value] if isinstance(value, list) else value for key, value in summary.items()}
        assert dumped == {key: bundle[key] for key in summary}
        assert set(summary) == {"next_action", "message", "decisions", "open_questions", "blockers", "dependencies"}

    same(mission)
    rich_history(agent, person, mission)
    same(mission)
    reconcile = new_mission(alice, "Reconcile", agent=agent)
    run = start(agent, reconcile)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    same(reconcile)
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="Mail server down")
    assert resume_summary(Mission.objects.get(pk=reconcile.pk))["next_action"] == "reconcile"
    same(reconcile)
    same(waiting_on_approval(alice, agent=agent)[0])
    same(waiting_on_gate(alice, agent=agent)[0])
    same(verified_then_more_work(alice, agent=agent).mission)
    missions.mission_pause(actor=person, mission_id=reconcile.pk)
    same(reconcile)
    missions.mission_cancel(actor=person, mission_id=reconcile.pk)
    same(reconcile)
