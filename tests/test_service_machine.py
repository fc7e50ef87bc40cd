"""The state machine: the transition table, next_action and message for every row of API.md's
"Status and next action"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from quests.models import AuditEvent, Mission, MissionStatus as S
from quests.services import approvals, machine, milestones, missions, operations, runs
from quests.services.audit import Actor
from quests.services.bundle import resume_bundle
from quests.services.errors import Conflict
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db

ALL = set(S.values)

# API.md, "Status and next action", as a table of (event, from-statuses, to-statuses).
EXPECTED = {
    "start_run": ({S.READY, S.BLOCKED}, {S.RUNNING}),
    "interrupt": ({S.RUNNING}, {S.READY}),
    "await_approval": ({S.RUNNING}, {S.WAITING_FOR_APPROVAL}),
    "settle": ({S.WAITING_FOR_APPROVAL}, {S.READY}),
    "unsettle": ({S.READY}, {S.WAITING_FOR_APPROVAL}),
    "stop_blocked": ({S.RUNNING}, {S.BLOCKED}),
    "stop_failed": ({S.RUNNING}, {S.FAILED}),
    "complete": ({S.RUNNING}, {S.COMPLETED}),
    "pause": ({S.READY, S.RUNNING, S.WAITING_FOR_APPROVAL, S.BLOCKED}, {S.PAUSED}),
    "unpause": ({S.PAUSED, S.FAILED}, {S.READY, S.WAITING_FOR_APPROVAL}),
    "cancel": (ALL - {S.CANCELLED, S.COMPLETED}, {S.CANCELLED}),
    # Restore is refused while a run is active (so never from running) and on terminal missions.
    "restore": (ALL - {S.RUNNING, S.CANCELLED, S.COMPLETED}, {S.READY}),
}


@pytest.fixture
def person(alice) -> Actor:
    return Actor(user=alice)


@pytest.fixture
def agent(alice) -> Actor:
    token, _ = token_create(user=alice, name="machine-agent")
    return Actor(user=alice, token=token)


def mission_in(owner, status: str, **fields) -> Mission:
    return Mission.objects.create(owner=owner, title="T", objective="O", status=status, **fields)


def test_the_table_is_api_md(alice):
    assert {event: (set(f), set(t)) for event, (f, t) in machine.TRANSITIONS.items()} == EXPECTED


def test_terminal_statuses_lead_nowhere():
    for froms, _ in machine.TRANSITIONS.values():
        assert not froms & {S.CANCELLED, S.COMPLETED}


def test_the_statuses_a_run_cannot_start_from_are_api_mds():
    assert machine.NOT_STARTABLE == {S.WAITING_FOR_APPROVAL, S.PAUSED, S.FAILED, S.CANCELLED, S.COMPLETED}


def test_each_agent_stop_reason_has_its_transition():
    assert machine.STOP_EVENTS == {
        "blocked_external": ("stop_blocked", S.BLOCKED),
        "failed_retry_budget": ("stop_failed", S.FAILED),
        "completed": ("complete", S.COMPLETED),
    }


@pytest.mark.parametrize("event", sorted(EXPECTED))
@pytest.mark.parametrize("status", sorted(ALL))
def test_a_transition_is_applied_only_from_an_allowed_status(alice, person, event, status):
    mission = mission_in(alice, status)
    froms, tos = EXPECTED[event]
    to = sorted(tos)[0]
    assert machine.can(mission, event) is (status in froms)
    if status in froms:
        machine.transition(mission, event=event, to=to, actor=person)
        assert Mission.objects.get(pk=mission.pk).status == to
        audit = AuditEvent.objects.filter(mission=mission, entity="mission").last()
        assert (audit.action, audit.from_state, audit.to_state, audit.actor) == (event, status, to, "user:alice")
    else:
        with pytest.raises(Conflict) as refused:
            machine.transition(mission, event=event, to=to, actor=person)
        assert refused.value.code == "invalid_transition"
        assert Mission.objects.get(pk=mission.pk).status == status
        assert not AuditEvent.objects.filter(mission=mission, entity="mission").exists()


@pytest.mark.parametrize("event", sorted(EXPECTED))
def test_a_transition_cannot_lead_somewhere_the_table_does_not_allow(alice, person, event):
    froms, tos = EXPECTED[event]
    mission = mission_in(alice, sorted(froms)[0])
    for to in ALL - tos:
        with pytest.raises(Conflict):
            machine.transition(mission, event=event, to=to, actor=person)


def test_a_transition_records_the_stop_reason_and_ends_terminal_missions(alice, person):
    mission = mission_in(alice, S.RUNNING)
    retry_at = timezone.now() + timedelta(hours=1)
    machine.transition(mission, event="stop_blocked", to=S.BLOCKED, actor=person, stop_reason="blocked_external", detail="Down", retry_at=retry_at)
    mission.refresh_from_db()
    assert (mission.stop_reason, mission.stop_detail, mission.retry_at, mission.ended_at) == ("blocked_external", "Down", retry_at, None)
    machine.transition(mission, event="cancel", to=S.CANCELLED, actor=person, stop_reason="cancelled_by_user")
    mission.refresh_from_db()
    assert mission.ended_at is not None
    assert mission.retry_at is None


def test_every_transition_bumps_the_state_version(alice, person):
    mission = mission_in(alice, S.READY)
    before = mission.state_version
    machine.transition(mission, event="pause", to=S.PAUSED, actor=person)
    assert Mission.objects.get(pk=mission.pk).state_version == before + 1


# next_action: first rule that matches, for every status and every kind of pending work.
NEXT_ACTION = {
    S.COMPLETED: "none",
    S.CANCELLED: "none",
    S.PAUSED: "await_user",
    S.FAILED: "await_user",
    S.WAITING_FOR_APPROVAL: "await_approval",
    S.RUNNING: "in_progress",
    S.BLOCKED: "retry_external",
    S.READY: "resume",
}


@pytest.mark.parametrize("status", sorted(ALL))
@pytest.mark.parametrize("attempted", [False, True])
@pytest.mark.parametrize("for_new_run", [False, True])
def test_next_action_follows_the_table(alice, status, attempted, for_new_run):
    mission = mission_in(alice, status)
    action = machine.next_action(mission, machine.Pending(any_attempted=attempted), for_new_run=for_new_run)
    expected = NEXT_ACTION[status]
    if status == S.RUNNING and for_new_run:
        expected = "resume"  # the bundle of a run just started skips in_progress
    if attempted and expected in ("resume", "retry_external"):
        expected = "reconcile"
    assert action == expected


def bundle(mission: Mission, **kwargs) -> dict:
    return resume_bundle(mission, **kwargs)


def start(agent: Actor, mission: Mission):
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="t")
    return run


def new(agent: Actor) -> Mission:
    mission, _ = missions.mission_create(actor=agent, title="Offsite", objective="Book it")
    return mission


def test_row_none_for_a_completed_mission(agent):
    mission = new(agent)
    runs.run_stop(actor=agent, run_id=start(agent, mission).pk, reason="completed")
    b = bundle(mission)
    assert (b["next_action"], b["message"]) == ("none", "Quest complete.")


def test_row_none_for_a_cancelled_mission(agent, person):
    mission = new(agent)
    missions.mission_cancel(actor=person, mission_id=mission.pk)
    b = bundle(mission)
    assert b["next_action"] == "none"
    assert "Cancelled" in b["message"]


def test_row_await_user_for_a_paused_mission(agent, person):
    mission = new(agent)
    start(agent, mission)
    missions.mission_pause(actor=person, mission_id=mission.pk)
    b = bundle(mission)
    assert b["next_action"] == "await_user"
    assert "Paused" in b["message"]
    assert b["mission"]["stop_reason"] == "paused_by_user"


def test_row_await_user_for_a_failed_mission(agent):
    mission = new(agent)
    runs.run_stop(actor=agent, run_id=start(agent, mission).pk, reason="failed_retry_budget", detail="Venue API refused 5 times")
    b = bundle(mission)
    assert b["next_action"] == "await_user"
    assert "Venue API refused 5 times" in b["message"]
    assert "retry budget" in b["message"]


def test_row_await_approval_names_the_action(agent):
    mission = new(agent)
    approvals.approval_request(actor=agent, run_id=start(agent, mission).pk, action="pay the deposit", payload={}, reason="money")
    b = bundle(mission)
    assert b["next_action"] == "await_approval"
    assert "pay the deposit" in b["message"]


def test_row_await_approval_names_the_gate_milestone(agent):
    mission = new(agent)
    milestones.milestone_claim(actor=agent, run_id=start(agent, mission).pk, kind="plan_approved", title="The plan", gate=True)
    b = bundle(mission)
    assert b["next_action"] == "await_approval"
    assert "The plan" in b["message"]


def test_row_in_progress_names_the_run(agent):
    mission = new(agent)
    start(agent, mission)
    b = bundle(mission)
    assert b["next_action"] == "in_progress"
    assert "run 1" in b["message"]


def test_row_in_progress_is_skipped_for_the_run_just_started(agent):
    mission = new(agent)
    start(agent, mission)
    assert bundle(mission, for_new_run=True)["next_action"] == "resume"


def test_row_reconcile_when_an_operation_was_attempted(agent):
    mission = new(agent)
    run = start(agent, mission)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="SMTP down")
    b = bundle(mission)
    assert b["next_action"] == "reconcile"
    assert "attempted" in b["message"]


def test_row_reconcile_comes_before_in_progress_only_for_a_new_run(agent):
    mission = new(agent)
    run = start(agent, mission)
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    assert bundle(mission)["next_action"] == "in_progress"
    assert bundle(mission, for_new_run=True)["next_action"] == "reconcile"


def test_row_retry_external_says_what_blocks_and_when(agent):
    mission = new(agent)
    retry_at = timezone.now() + timedelta(hours=2)
    runs.run_stop(actor=agent, run_id=start(agent, mission).pk, reason="blocked_external", detail="Venue API is down", retry_at=retry_at)
    b = bundle(mission)
    assert b["next_action"] == "retry_external"
    assert "Venue API is down" in b["message"]
    assert f"{timezone.localtime(retry_at):%H:%M}" in b["message"]


def test_row_resume_for_a_new_mission(agent):
    b = bundle(new(agent))
    assert (b["next_action"], b["message"]) == ("resume", "Ready to start.")
    assert b["mission"]["stop_reason"] is None


def test_row_resume_after_an_interruption(agent, make_stale):
    mission = new(agent)
    make_stale(start(agent, mission).pk)
    assert runs.sweep_stalled_runs() == 1
    b = bundle(mission)
    assert b["next_action"] == "resume"
    assert b["mission"]["stop_reason"] == "interrupted"
    assert "stopped unexpectedly" in b["message"]


def test_row_resume_after_an_approval(agent, person):
    mission = new(agent)
    approval, _ = approvals.approval_request(actor=agent, run_id=start(agent, mission).pk, action="pay", payload={}, reason="r")
    approvals.approval_decide(actor=person, approval_id=approval.pk, decision="approve")
    b = bundle(mission)
    assert b["next_action"] == "resume"
    assert b["message"] == "Ready to resume from the last checkpoint."


def test_every_message_is_a_sentence_for_a_person(agent, person):
    for status in ALL:
        mission = Mission.objects.create(owner=agent.user, title="T", objective="O", status=status, stop_detail="the API is down")
        for pending in (machine.Pending(), machine.Pending(approval_action="pay"), machine.Pending(any_attempted=True, run_number=2)):
            action = machine.next_action(mission, pending)
            text = machine.message(mission, action, pending)
            assert text and text[0].isupper(), (status, action, text)
            assert "_" not in text, (status, action, text)
