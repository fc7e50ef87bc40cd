"""The transition tables of runs, approvals, milestones, operations and memory proposals, the one
function that applies them, and the one rule that ends what is pending (API.md): cancel or
completion expires approvals and withdraws milestones; a restore expires approvals and gate
milestones. Every change writes its audit event."""

import pytest

from checkpoints.models import Operation, OperationStatus as O, Record
from quests.models import (
    Approval,
    ApprovalStatus as A,
    AuditEvent,
    MemoryProposal,
    Milestone,
    Mission,
    ReviewStatus as R,
    StopReason,
)
from quests.selectors.people import inbox_milestones
from quests.services import approvals, machine, memory, milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.errors import Conflict
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db

P = MemoryProposal.Status

# The tables as API.md describes them: event -> (from-states, to-states).
EXPECTED = {
    "run": {"end": ({"active"}, set(StopReason.values))},
    "approval": {
        "approve": ({A.PENDING}, {A.APPROVED}),
        "edit": ({A.PENDING}, {A.EDITED}),
        "reject": ({A.PENDING}, {A.REJECTED}),
        "expire": ({A.PENDING}, {A.EXPIRED}),
        "undo": ({A.APPROVED, A.EDITED, A.REJECTED}, {A.PENDING}),
    },
    "milestone": {
        "approve": ({R.PENDING_REVIEW, "withdrawn"}, {R.APPROVED}),
        "correct": ({R.PENDING_REVIEW, "withdrawn"}, {R.CORRECTED}),
        "pause": ({R.PENDING_REVIEW, "withdrawn"}, set()),
        "withdraw": ({R.PENDING_REVIEW}, {"withdrawn"}),
        "expire": ({R.PENDING_REVIEW}, {R.EXPIRED}),
    },
    "operation": {
        "attempt": ({O.PLANNED, O.ATTEMPTED, O.FAILED}, {O.ATTEMPTED}),
        "complete": ({O.PLANNED, O.ATTEMPTED, O.FAILED}, {O.COMPLETED}),
        "fail": ({O.PLANNED, O.ATTEMPTED, O.FAILED}, {O.FAILED}),
    },
    "memory_proposal": {"approve": ({P.PENDING}, {P.APPROVED}), "decline": ({P.PENDING}, {P.DECLINED})},
}


@pytest.fixture
def person(alice) -> Actor:
    return Actor(user=alice)


@pytest.fixture
def agent(alice) -> Actor:
    token, _ = token_create(user=alice, name="transitions-agent")
    return Actor(user=alice, token=token)


def new_run(agent: Actor):
    mission, _ = missions.mission_create(actor=agent, title="Offsite", objective="Book it")
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="t")
    return mission, run


def events(entity: str, entity_id: int) -> list[tuple[str, str, str]]:
    rows = AuditEvent.objects.filter(entity=entity, entity_id=entity_id).order_by("id")
    return [(e.action, e.from_state, e.to_state) for e in rows]


# -- the tables ----------------------------------------------------------------------------


def test_the_tables_are_api_md():
    tables = {table.entity: table.moves for table in machine.TABLES.values()}
    assert {entity: {event: (set(f), set(t)) for event, (f, t) in moves.items()} for entity, moves in tables.items()} == EXPECTED


# A person's decision is final but for its undo, in a short window before any run acts on it
# (tests/test_service_undo.py proves that window's rule and its race with a run start).
UNDO_WINDOW = {("approval", "undo")}


def test_a_final_state_leads_nowhere():
    finals = {
        "approval": {A.APPROVED, A.EDITED, A.REJECTED, A.EXPIRED},
        "milestone": {R.APPROVED, R.CORRECTED, R.EXPIRED},
        "operation": {O.COMPLETED},
        "memory_proposal": {P.APPROVED, P.DECLINED},
        "run": set(StopReason.values),
    }
    for table in machine.TABLES.values():
        for event, (froms, _) in table.moves.items():
            if (table.entity, event) not in UNDO_WINDOW:
                assert not set(froms) & finals[table.entity], table.entity


def test_an_illegal_move_is_refused_and_leaves_no_trace(agent, person):
    mission, run = new_run(agent)
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={}, reason="r")
    approvals.approval_decide(actor=person, approval_id=approval.pk, decision="reject")
    approval.refresh_from_db()
    before = AuditEvent.objects.count()
    with pytest.raises(Conflict) as refused:
        machine.move(approval, event="expire", to=A.EXPIRED, actor=person, mission=mission)
    assert refused.value.code == "invalid_transition"
    assert "already rejected" in refused.value.message
    assert AuditEvent.objects.count() == before
    assert Approval.objects.get(pk=approval.pk).status == A.REJECTED


def test_a_move_to_a_state_the_event_cannot_reach_is_refused(agent):
    mission, run = new_run(agent)
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={}, reason="r")
    with pytest.raises(Conflict):
        machine.move(approval, event="approve", to=A.REJECTED, actor=agent, mission=mission)
    assert Approval.objects.get(pk=approval.pk).status == A.PENDING


def test_a_run_ends_once(agent):
    mission, run = new_run(agent)
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="down")
    run.refresh_from_db()
    with pytest.raises(Conflict):
        machine.move(run, event="end", to=StopReason.INTERRUPTED, actor=agent, mission=mission)
    assert events("run", run.pk) == [("start", "", "active"), ("end", "active", "blocked_external")]


def test_each_decision_writes_its_audit_event(agent, person):
    mission, run = new_run(agent)
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={"eur": 1}, reason="r")
    approvals.approval_decide(actor=person, approval_id=approval.pk, decision="edit", payload={"eur": 2})
    assert events("approval", approval.pk) == [("request", "", "pending"), ("edit", "pending", "edited")]
    assert Approval.objects.get(pk=approval.pk).decided_payload == {"eur": 2}


def test_a_memory_proposal_is_decided_once(agent, person):
    _, run = new_run(agent)
    proposal, _ = memory.memory_propose(actor=agent, run_id=run.pk, name="diet", value="vegetarian", reason="r")
    memory.memory_decide(actor=person, proposal_id=proposal.pk, decision="decline")
    with pytest.raises(Conflict) as refused:
        memory.memory_decide(actor=person, proposal_id=proposal.pk, decision="approve")
    assert "already declined" in refused.value.message
    assert events("memory_proposal", proposal.pk) == [("propose", "", "pending"), ("decline", "pending", "declined")]


# -- operations ----------------------------------------------------------------------------


def test_an_operation_is_terminal_once_completed_or_failed_for_good(agent):
    _, run = new_run(agent)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    assert not op.is_terminal
    operations.operation_fail(actor=agent, operation_id=op.pk, error="timeout", retryable=True)
    assert not Operation.objects.get(pk=op.pk).is_terminal
    operations.operation_fail(actor=agent, operation_id=op.pk, error="refused", retryable=False)
    assert Operation.objects.get(pk=op.pk).is_terminal
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="x", external_status="sent")
    assert Operation.objects.get(pk=op.pk).is_terminal


def test_an_operation_failed_for_good_is_not_attempted_again(agent):
    _, run = new_run(agent)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    operations.operation_fail(actor=agent, operation_id=op.pk, error="refused", retryable=False)
    with pytest.raises(Conflict) as refused:
        operations.operation_attempt(actor=agent, operation_id=op.pk)
    assert refused.value.code == "invalid_transition"
    assert "failed for good" in refused.value.message


def test_an_observation_keeps_the_operation_status_in_its_audit_event(agent):
    _, run = new_run(agent)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="booking", target="t", request={})
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="b-1", external_status="confirmed")
    operations.operation_observe(actor=agent, operation_id=op.pk, external_status="cancelled")
    last = AuditEvent.objects.filter(entity="operation", entity_id=op.pk).last()
    assert (last.action, last.from_state, last.to_state) == ("observe", "completed", "completed")
    assert last.data["external_status_from"] == "confirmed" and last.data["external_status"] == "cancelled"


# -- ending what is pending ----------------------------------------------------------------


def test_cancel_expires_pending_approvals_with_their_audit_events(agent, person):
    mission, run = new_run(agent)
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={}, reason="r")
    missions.mission_cancel(actor=person, mission_id=mission.pk)
    approval.refresh_from_db()
    assert approval.status == A.EXPIRED and approval.decided_at is not None
    assert events("approval", approval.pk)[-1] == ("expire", "pending", "expired")


def test_cancel_withdraws_pending_milestones_with_their_audit_events(agent, person):
    mission, run = new_run(agent)
    plain, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="Research")
    missions.mission_cancel(actor=person, mission_id=mission.pk)
    plain.refresh_from_db()
    assert (plain.review_status, plain.withdrawn) == (R.PENDING_REVIEW, True)
    assert events("milestone", plain.pk)[-1] == ("withdraw", "pending_review", "withdrawn")
    assert not inbox_milestones(person.user).exists()


def test_cancel_withdraws_a_pending_gate_milestone_without_a_run(agent, person):
    mission, run = new_run(agent)
    gate, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="plan_approved", title="Plan", gate=True)
    missions.mission_cancel(actor=person, mission_id=mission.pk)
    gate.refresh_from_db()
    assert (gate.review_status, gate.withdrawn) == (R.PENDING_REVIEW, True)
    assert events("milestone", gate.pk)[-1] == ("withdraw", "pending_review", "withdrawn")


def test_completion_withdraws_pending_milestones_with_their_audit_events(agent):
    mission, run = new_run(agent)
    plain, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="draft_ready", title="Draft")
    runs.run_stop(actor=agent, run_id=run.pk, reason="completed")
    plain.refresh_from_db()
    assert (plain.review_status, plain.withdrawn) == (R.PENDING_REVIEW, True)
    assert events("milestone", plain.pk)[-1] == ("withdraw", "pending_review", "withdrawn")


def test_a_withdrawn_milestone_can_still_be_reviewed(agent, person):
    mission, run = new_run(agent)
    plain, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="draft_ready", title="Draft")
    runs.run_stop(actor=agent, run_id=run.pk, reason="completed")
    milestones.milestone_review(actor=person, milestone_id=plain.pk, action="approve")
    assert events("milestone", plain.pk)[-1] == ("approve", "withdrawn", "approved")
    assert Milestone.objects.get(pk=plain.pk).review_status == R.APPROVED


def test_restore_expires_pending_approvals_and_gate_milestones(agent, person):
    mission, run = new_run(agent)
    first = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 1})[0]
    plain, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="Research")
    gate, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="plan_approved", title="Plan", gate=True)
    missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=first.pk)
    gate.refresh_from_db()
    plain.refresh_from_db()
    assert (gate.review_status, gate.withdrawn) == (R.EXPIRED, False)
    assert events("milestone", gate.pk)[-1] == ("expire", "pending_review", "expired")
    # Only gates hold a mission; a plain milestone stays reviewable.
    assert (plain.review_status, plain.withdrawn) == (R.PENDING_REVIEW, False)
    assert Mission.objects.get(pk=mission.pk).status == "ready"


def test_restore_expires_a_pending_approval_with_its_audit_event(agent, person):
    mission, run = new_run(agent)
    first = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 1})[0]
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={}, reason="r")
    missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=first.pk)
    approval.refresh_from_db()
    assert approval.status == A.EXPIRED
    assert events("approval", approval.pk)[-1] == ("expire", "pending", "expired")


# -- the repeated filters ------------------------------------------------------------------


def test_awaiting_review_leaves_out_reviewed_and_withdrawn_milestones(agent, person):
    mission, run = new_run(agent)
    plain, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="Research")
    done, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="draft_ready", title="Draft")
    milestones.milestone_review(actor=person, milestone_id=done.pk, action="approve")
    gate, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="plan_approved", title="Plan", gate=True)
    assert set(mission.milestones.awaiting_review()) == {plain, gate}
    assert list(mission.milestones.gates_awaiting_review()) == [gate]
    missions.mission_cancel(actor=person, mission_id=mission.pk)
    assert not Milestone.objects.awaiting_review().filter(mission=mission).exists()


def test_live_records_leave_out_resolved_and_abandoned_ones(agent):
    mission, run = new_run(agent)
    question, _ = records.record_create(actor=agent, run_id=run.pk, kind="open_question", text="Parking?")
    records.record_create(actor=agent, run_id=run.pk, kind="decision", text="No parking needed", resolves=question.pk)
    note, _ = records.record_create(actor=agent, run_id=run.pk, kind="note", text="later")
    Record.objects.filter(pk=note.pk).update(abandoned=True)
    assert [r.kind for r in Record.objects.live().filter(mission=mission)] == ["decision"]
