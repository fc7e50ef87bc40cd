"""mission_restore: a new branch from the chosen checkpoint; what is abandoned, what is never rolled back."""

import pytest

from checkpoints.models import Checkpoint, Operation, Record
from checkpoints.services import checkpoint_agent_state, checkpoint_documents
from quests.models import Approval, AuditEvent, Milestone, Mission
from quests.services import approvals, milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.bundle import resume_bundle
from quests.services.errors import Conflict, Forbidden, InvalidInput, NotFound
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(alice) -> Actor:
    return Actor(user=alice)


@pytest.fixture
def agent(alice) -> Actor:
    token, _ = token_create(user=alice, name="restore-agent")
    return Actor(user=alice, token=token)


@pytest.fixture
def mission(agent) -> Mission:
    mission, _ = missions.mission_create(actor=agent, title="Offsite", objective="Book", constraints=["Before Friday"])
    return mission


def start(agent: Actor, mission: Mission):
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk)
    return run


def save(agent: Actor, run, state: dict) -> Checkpoint:
    checkpoint, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state=state)
    return checkpoint


def note(agent: Actor, run, kind: str, text: str, **extra) -> Record:
    record, _ = records.record_create(actor=agent, run_id=run.pk, kind=kind, text=text, **extra)
    return record


def restore(person: Actor, mission: Mission, checkpoint: Checkpoint) -> Checkpoint:
    _, new = missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=checkpoint.pk)
    return new


def test_it_opens_a_new_branch_from_the_chosen_checkpoint(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {"plan": "A", "step": 1})
    abandoned_head = save(agent, run, {"plan": "B", "step": 2})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    head_before = Mission.objects.get(pk=mission.pk).head_checkpoint
    new = restore(person, mission, chosen)
    assert new.trigger == "restore"
    assert new.parent_id == chosen.pk
    assert new.seq == head_before.seq + 1
    assert checkpoint_agent_state(new) == {"plan": "A", "step": 1}
    assert new.agent_state_refs == chosen.agent_state_refs
    mission.refresh_from_db()
    assert mission.head_checkpoint_id == new.pk
    assert mission.status == "ready"
    # The abandoned branch is kept: a tree, not a rewrite.
    assert Checkpoint.objects.filter(pk=abandoned_head.pk, parent_id=chosen.pk).exists()
    assert checkpoint_agent_state(Checkpoint.objects.get(pk=abandoned_head.pk)) == {"plan": "B", "step": 2}


def test_records_after_the_chosen_checkpoint_are_abandoned_but_kept(agent, person, mission):
    run = start(agent, mission)
    before = note(agent, run, "decision", "Lakeside")
    chosen = save(agent, run, {})
    after = note(agent, run, "decision", "Hilltop")
    question = note(agent, run, "open_question", "Parking?")
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    restore(person, mission, chosen)
    assert Record.objects.get(pk=before.pk).abandoned is False
    assert Record.objects.get(pk=after.pk).abandoned is True
    assert Record.objects.get(pk=question.pk).abandoned is True
    b = resume_bundle(mission)
    assert [r["text"] for r in b["decisions"]] == ["Lakeside"]
    assert b["open_questions"] == []


def test_a_resolution_made_on_the_abandoned_branch_is_undone(agent, person, mission):
    run = start(agent, mission)
    question = note(agent, run, "open_question", "Which venue?")
    chosen = save(agent, run, {})
    note(agent, run, "decision", "Hilltop", resolves=question.pk)
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    restore(person, mission, chosen)
    assert Record.objects.get(pk=question.pk).resolved is False
    assert [r["text"] for r in resume_bundle(mission)["open_questions"]] == ["Which venue?"]


def test_the_restore_checkpoints_state_leaves_out_the_abandoned_records(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    note(agent, run, "decision", "Hilltop")
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    new = restore(person, mission, chosen)
    state, _ = checkpoint_documents(new)
    assert state["decisions"] == []


def test_constraints_and_the_operation_ledger_are_never_rolled_back(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    missions.constraint_add(actor=person, mission_id=mission.pk, text="Added after the checkpoint")
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="deposit", kind="payment", target="venue", request={"eur": 500})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="pay-1", external_status="paid")
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    restore(person, mission, chosen)
    b = resume_bundle(mission)
    assert [c["text"] for c in b["constraints"]] == ["Before Friday", "Added after the checkpoint"]
    assert [(o["key"], o["status"]) for o in b["operations"]["completed"]] == [("deposit", "completed")]
    assert Operation.objects.get(pk=op.pk).status == "completed"
    # The next run learns the payment happened, whatever branch it is on.
    second = start(agent, mission)
    replay, replayed = operations.operation_plan(actor=agent, run_id=second.pk, key="deposit", kind="payment", target="venue", request={"eur": 500})
    assert (replay.pk, replayed, replay.status) == (op.pk, True, "completed")


def test_pending_approvals_expire_and_ordinary_milestones_stay_pending(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    ordinary, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="Ordinary")
    approval, _ = approvals.approval_request(actor=agent, run_id=run.pk, action="pay", payload={}, reason="r")
    missions.mission_pause(actor=person, mission_id=mission.pk)
    missions.mission_unpause(actor=person, mission_id=mission.pk)
    assert Mission.objects.get(pk=mission.pk).status == "waiting_for_approval"
    restore(person, mission, chosen)
    assert Approval.objects.get(pk=approval.pk).status == "expired"
    assert Milestone.objects.get(pk=ordinary.pk).review_status == "pending_review"
    assert Mission.objects.get(pk=mission.pk).status == "ready"


def test_a_pending_gate_milestone_expires(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    gate, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="plan_approved", title="Plan", gate=True)
    assert Mission.objects.get(pk=mission.pk).status == "waiting_for_approval"
    restore(person, mission, chosen)
    assert Milestone.objects.get(pk=gate.pk).review_status == "expired"
    assert Mission.objects.get(pk=mission.pk).status == "ready"
    assert runs.run_start(actor=agent, mission_id=mission.pk)[0].is_active


@pytest.mark.parametrize("stop", ["blocked_external", "failed_retry_budget", "pause"])
def test_it_is_allowed_from_every_status_without_an_active_run(agent, person, mission, stop):
    run = start(agent, mission)
    chosen = save(agent, run, {"a": 1})
    if stop == "pause":
        missions.mission_pause(actor=person, mission_id=mission.pk)
    else:
        runs.run_stop(actor=agent, run_id=run.pk, reason=stop)
    restore(person, mission, chosen)
    assert Mission.objects.get(pk=mission.pk).status == "ready"


def test_it_is_refused_while_a_run_is_active(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    with pytest.raises(Conflict):
        restore(person, mission, chosen)
    assert Mission.objects.get(pk=mission.pk).head_checkpoint.trigger == "agent"
    assert run.__class__.objects.get(pk=run.pk).ended_at is None


@pytest.mark.parametrize("ending", ["cancel", "complete"])
def test_it_is_refused_on_a_finished_mission(agent, person, mission, ending):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    after = note(agent, run, "decision", "Later")
    if ending == "cancel":
        missions.mission_cancel(actor=person, mission_id=mission.pk)
    else:
        runs.run_stop(actor=agent, run_id=run.pk, reason="completed")
    head = Mission.objects.get(pk=mission.pk).head_checkpoint_id
    with pytest.raises(Conflict):
        restore(person, mission, chosen)
    assert Mission.objects.get(pk=mission.pk).head_checkpoint_id == head
    assert Record.objects.get(pk=after.pk).abandoned is False


def test_only_a_person_restores(agent, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    with pytest.raises(Forbidden):
        missions.mission_restore(actor=agent, mission_id=mission.pk, checkpoint_id=chosen.pk)


def test_it_needs_a_checkpoint_of_the_same_mission(agent, person, mission, bob):
    other, _ = missions.mission_create(actor=agent, title="Other", objective="O")
    run = start(agent, other)
    foreign = save(agent, run, {})
    with pytest.raises(InvalidInput):
        missions.mission_restore(actor=person, mission_id=mission.pk, checkpoint_id=foreign.pk)
    with pytest.raises(NotFound):
        missions.mission_restore(actor=Actor(user=bob), mission_id=other.pk, checkpoint_id=foreign.pk)


def test_a_restore_is_audited(agent, person, mission):
    run = start(agent, mission)
    chosen = save(agent, run, {})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    new = restore(person, mission, chosen)
    event = AuditEvent.objects.get(mission=mission, entity="checkpoint", action="restore")
    assert (event.from_state, event.to_state, event.actor) == (str(chosen.seq), str(new.seq), "user:alice")


def test_restoring_twice_branches_again(agent, person, mission):
    run = start(agent, mission)
    first = save(agent, run, {"v": 1})
    save(agent, run, {"v": 2})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    restore(person, mission, first)
    second_run = start(agent, mission)
    save(agent, second_run, {"v": 3})
    runs.run_stop(actor=agent, run_id=second_run.pk, reason="blocked_external")
    again = restore(person, mission, first)
    assert checkpoint_agent_state(again) == {"v": 1}
    assert Checkpoint.objects.filter(mission=mission, parent_id=first.pk).count() == 3


def test_restoring_onto_an_abandoned_branch_brings_its_records_back_as_they_were(agent, person, mission):
    run = start(agent, mission)
    question = note(agent, run, "open_question", "Which venue?")
    early = save(agent, run, {"at": "early"})
    answer = note(agent, run, "decision", "Lakeside", resolves=question.pk)
    blocker = note(agent, run, "blocker", "Deposit needed")
    late = save(agent, run, {"at": "late"})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external")
    restore(person, mission, early)
    b = resume_bundle(mission)
    assert ([r["text"] for r in b["open_questions"]], b["decisions"], b["blockers"]) == (["Which venue?"], [], [])
    second = start(agent, mission)
    detour = note(agent, second, "decision", "Hilltop")
    runs.run_stop(actor=agent, run_id=second.pk, reason="blocked_external")
    restore(person, mission, late)
    b = resume_bundle(mission)
    # Exactly what the late checkpoint held: the question answered, the answer and the blocker live.
    assert b["open_questions"] == []
    assert [r["id"] for r in b["decisions"]] == [answer.pk]
    assert [r["id"] for r in b["blockers"]] == [blocker.pk]
    assert Record.objects.get(pk=detour.pk).abandoned is True
    assert Record.objects.get(pk=question.pk).resolved is True
