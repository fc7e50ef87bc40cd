"""Every status change in one place: a table of allowed transitions per entity (mission, run,
approval, milestone, operation, memory proposal), the functions that apply them — each saving the
row and writing its audit event in the caller's transaction — and the next action / plain-language
message that follow from a mission's state."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Model
from django.utils import timezone

from checkpoints.models import Operation, OperationStatus as O
from notifications.events import notify_mission_moved
from quests.models import (
    Approval,
    ApprovalStatus as A,
    AuditEvent,
    MemoryProposal,
    Milestone,
    Mission,
    MissionStatus as S,
    ReviewStatus as R,
    Run,
    StopReason,
)
from quests.retention.services.expiry import retention_mission_ended
from quests.services.audit import Actor, audit_event
from quests.services.errors import Conflict
from quests.services.preferences import moment

Moves = dict[str, tuple[frozenset[str], frozenset[str]]]

# event -> (statuses it may start from, statuses it may lead to)
TRANSITIONS: Moves = {
    "start_run": (frozenset({S.READY, S.BLOCKED}), frozenset({S.RUNNING})),
    "interrupt": (frozenset({S.RUNNING}), frozenset({S.READY})),
    "await_approval": (frozenset({S.RUNNING}), frozenset({S.WAITING_FOR_APPROVAL})),
    "settle": (frozenset({S.WAITING_FOR_APPROVAL}), frozenset({S.READY})),
    # A person took back a decision before any run started: the mission waits for them again.
    "unsettle": (frozenset({S.READY}), frozenset({S.WAITING_FOR_APPROVAL})),
    "stop_blocked": (frozenset({S.RUNNING}), frozenset({S.BLOCKED})),
    "stop_failed": (frozenset({S.RUNNING}), frozenset({S.FAILED})),
    "complete": (frozenset({S.RUNNING}), frozenset({S.COMPLETED})),
    "pause": (frozenset({S.READY, S.RUNNING, S.WAITING_FOR_APPROVAL, S.BLOCKED}), frozenset({S.PAUSED})),
    "unpause": (frozenset({S.PAUSED, S.FAILED}), frozenset({S.READY, S.WAITING_FOR_APPROVAL})),
    "cancel": (
        frozenset({S.READY, S.RUNNING, S.WAITING_FOR_APPROVAL, S.BLOCKED, S.FAILED, S.PAUSED}),
        frozenset({S.CANCELLED}),
    ),
    "restore": (frozenset({S.READY, S.WAITING_FOR_APPROVAL, S.BLOCKED, S.PAUSED, S.FAILED}), frozenset({S.READY})),
}

# The events no person takes: an agent's run starting, stopping or finishing, and the sweep that
# interrupts a run whose agent fell silent. A mission in a status they start from can change while
# nobody looks at it, so its page keeps asking (the other statuses move only when a person acts).
UNATTENDED_EVENTS = ("start_run", "interrupt", "await_approval", "stop_blocked", "stop_failed", "complete")
MOVES_UNATTENDED: frozenset[str] = frozenset().union(*(TRANSITIONS[event][0] for event in UNATTENDED_EVENTS))

# A run is `active` until it ends; then its state is the reason it stopped.
RUN_ACTIVE = "active"
RUN_TRANSITIONS: Moves = {"end": (frozenset({RUN_ACTIVE}), frozenset(StopReason.values))}

APPROVAL_TRANSITIONS: Moves = {
    "approve": (frozenset({A.PENDING}), frozenset({A.APPROVED})),
    "edit": (frozenset({A.PENDING}), frozenset({A.EDITED})),
    "reject": (frozenset({A.PENDING}), frozenset({A.REJECTED})),
    "expire": (frozenset({A.PENDING}), frozenset({A.EXPIRED})),
    # A person's own decision, taken back in time (approval_undo says when that is allowed).
    "undo": (frozenset({A.APPROVED, A.EDITED, A.REJECTED}), frozenset({A.PENDING})),
}

# `withdrawn` is a state of the machine, not a review status: the row keeps `pending_review` and
# only leaves the inbox. A withdrawn milestone can still be reviewed from its mission's page.
MILESTONE_WITHDRAWN = "withdrawn"
_UNREVIEWED = frozenset({R.PENDING_REVIEW, MILESTONE_WITHDRAWN})
MILESTONE_TRANSITIONS: Moves = {
    "approve": (_UNREVIEWED, frozenset({R.APPROVED})),
    "correct": (_UNREVIEWED, frozenset({R.CORRECTED})),
    # Reviewing with `pause` pauses the mission and leaves the milestone as it is.
    "pause": (_UNREVIEWED, frozenset()),
    "withdraw": (frozenset({R.PENDING_REVIEW}), frozenset({MILESTONE_WITHDRAWN})),
    "expire": (frozenset({R.PENDING_REVIEW}), frozenset({R.EXPIRED})),
}

# Whether a failed operation may be attempted again depends on its `retryable` flag, not on its
# status: `Operation.is_terminal` says so, and operation_attempt asks it first.
_OPEN_OPERATION = frozenset({O.PLANNED, O.ATTEMPTED, O.FAILED})
OPERATION_TRANSITIONS: Moves = {
    "attempt": (_OPEN_OPERATION, frozenset({O.ATTEMPTED})),
    # A receipt is accepted even after a failure: the truth about the outside world wins.
    "complete": (_OPEN_OPERATION, frozenset({O.COMPLETED})),
    "fail": (_OPEN_OPERATION, frozenset({O.FAILED})),
}

_P = MemoryProposal.Status
MEMORY_PROPOSAL_TRANSITIONS: Moves = {
    "approve": (frozenset({_P.PENDING}), frozenset({_P.APPROVED})),
    "decline": (frozenset({_P.PENDING}), frozenset({_P.DECLINED})),
}

OPERATION_REFUSALS = {
    ("completed", "attempt"): "This operation is completed; it must not be attempted again.",
    ("completed", "complete"): ("This operation is already completed with a different receipt; report later changes with observe."),
    ("completed", "fail"): "This operation is completed; a failure cannot be recorded over its receipt.",
}


@dataclass(frozen=True)
class Table:
    """How one entity's status is read, written and refused."""

    entity: str
    moves: Moves
    state: Callable[[Any], str]
    apply: Callable[[Any, str], list[str]]
    refusal: Callable[[str, str], str]


def _field(name: str) -> Callable[[Any, str], list[str]]:
    def apply(row: Any, to: str) -> list[str]:
        setattr(row, name, to)
        return [name]

    return apply


def _milestone_state(milestone: Milestone) -> str:
    if milestone.review_status == R.PENDING_REVIEW and milestone.withdrawn:
        return MILESTONE_WITHDRAWN
    return milestone.review_status


def _milestone_apply(milestone: Milestone, to: str) -> list[str]:
    if to == MILESTONE_WITHDRAWN:
        milestone.withdrawn = True
        return ["withdrawn"]
    milestone.review_status = to
    return ["review_status"]


def _run_apply(run: Run, to: str) -> list[str]:
    run.ended_at = timezone.now()
    run.stop_reason = to
    return ["ended_at", "stop_reason"]


def _already(noun: str) -> Callable[[str, str], str]:
    return lambda state, event: f"This {noun} was already {state.replace('_', ' ')}."


TABLES: dict[type[Model], Table] = {
    Run: Table(
        "run",
        RUN_TRANSITIONS,
        lambda run: RUN_ACTIVE if run.ended_at is None else str(run.stop_reason),
        _run_apply,
        lambda state, event: "This run has already ended.",
    ),
    Approval: Table("approval", APPROVAL_TRANSITIONS, lambda a: a.status, _field("status"), _already("approval")),
    Milestone: Table("milestone", MILESTONE_TRANSITIONS, _milestone_state, _milestone_apply, _already("milestone")),
    Operation: Table(
        "operation",
        OPERATION_TRANSITIONS,
        lambda op: op.status,
        _field("status"),
        lambda state, event: OPERATION_REFUSALS.get((state, event), f"A {state} operation cannot {event}."),
    ),
    MemoryProposal: Table("memory_proposal", MEMORY_PROPOSAL_TRANSITIONS, lambda p: p.status, _field("status"), _already("proposal")),
}


def _check(moves: Moves, state: str, event: str, to: str | None, message: Callable[[str, str], str]) -> None:
    """The one check every status change passes: 409 `invalid_transition` unless the table allows it."""
    froms, tos = moves[event]
    if state not in froms or (to is not None and to not in tos):
        raise Conflict(message(state, event), code="invalid_transition", status=state)


def state_of(row: Model) -> str:
    """The row's state as its table (and its audit events) name it."""
    return row.status if isinstance(row, Mission) else TABLES[type(row)].state(row)


def require(row: Model, event: str) -> None:
    """Refuse early, before any other check, when the row's state does not allow the event."""
    table = TABLES[type(row)]
    _check(table.moves, table.state(row), event, None, table.refusal)


def move(row: Model, *, event: str, to: str, actor: Actor, mission: Mission | None, fields: tuple[str, ...] = (), **data: Any) -> None:
    """Apply one transition to a run, approval, milestone, operation or memory proposal whose
    mission the caller holds locked: check it, save the row (with `fields` the caller changed
    alongside) and write its audit event."""
    event_row, changed = _moved(row, event=event, to=to, actor=actor, mission=mission, **data)
    row.save(update_fields=[*changed, *fields])
    event_row.save()


def moved(row: Model, *, event: str, to: str, actor: Actor, mission: Mission | None, **data: Any) -> AuditEvent:
    """`move` without writing anything: check the transition, apply it to the row in memory and
    return its audit event unsaved, for a caller that writes both in its own statement."""
    return _moved(row, event=event, to=to, actor=actor, mission=mission, **data)[0]


def _moved(row: Model, *, event: str, to: str, actor: Actor, mission: Mission | None, **data: Any) -> tuple[AuditEvent, list[str]]:
    table = TABLES[type(row)]
    previous = table.state(row)
    _check(table.moves, previous, event, to, table.refusal)
    changed = table.apply(row, to)
    event_row = audit_event(actor=actor, mission=mission, entity=table.entity, entity_id=row.pk, action=event, from_state=previous, to_state=to, **data)
    return event_row, changed


# How a run's stop reason moves the mission (the stop call and the people-only actions).
STOP_EVENTS: dict[str, tuple[str, str]] = {
    StopReason.BLOCKED_EXTERNAL: ("stop_blocked", S.BLOCKED),
    StopReason.FAILED_RETRY_BUDGET: ("stop_failed", S.FAILED),
    StopReason.COMPLETED: ("complete", S.COMPLETED),
}

NOT_STARTABLE = frozenset({S.WAITING_FOR_APPROVAL, S.PAUSED, S.FAILED, S.CANCELLED, S.COMPLETED})


def _mission_refusal(state: str, event: str) -> str:
    return f"A mission that is {state.replace('_', ' ')} cannot {event.replace('_', ' ')}."


def can(mission: Mission, event: str) -> bool:
    return mission.status in TRANSITIONS[event][0]


def transition(
    mission: Mission,
    *,
    event: str,
    to: str,
    actor: Actor,
    stop_reason: str | None = None,
    detail: str | None = None,
    retry_at: datetime | None = None,
    fields: tuple[str, ...] = (),
    save: bool = True,
) -> AuditEvent:
    """Apply one transition to a mission whose row the caller holds locked, saving it (with
    `fields` the caller changed alongside) and its audit event. With `save=False` nothing is
    written: the caller writes the mission and the returned audit event in its own statement."""
    _check(TRANSITIONS, mission.status, event, to, _mission_refusal)
    previous = mission.status
    mission.status = to
    changed = ["status", "updated_at", "state_version", *fields]
    if stop_reason is not None:
        mission.stop_reason = stop_reason
        mission.stop_detail = detail or ""
        mission.retry_at = retry_at
        changed += ["stop_reason", "stop_detail", "retry_at"]
    if to in (S.CANCELLED, S.COMPLETED):
        mission.ended_at = timezone.now()
        changed.append("ended_at")
        # The one place missions end: from here their working state starts to expire.
        changed += retention_mission_ended(mission)
    mission.state_version += 1
    moved = audit_event(
        actor=actor,
        mission=mission,
        entity="mission",
        entity_id=mission.pk,
        action=event,
        from_state=previous,
        to_state=to,
        stop_reason=stop_reason,
        detail=detail or "",
    )
    notify_mission_moved(mission, to)
    if save:
        mission.save(update_fields=changed)
        moved.save()
    return moved


@dataclass(frozen=True)
class Pending:
    approval_action: str | None = None
    milestone_title: str | None = None
    any_attempted: bool = False
    run_number: int | None = None


def next_action(mission: Mission, pending: Pending, *, for_new_run: bool = False) -> str:
    """API.md's table, first rule that matches."""
    status = mission.status
    if status in (S.COMPLETED, S.CANCELLED):
        return "none"
    if status in (S.PAUSED, S.FAILED):
        return "await_user"
    if status == S.WAITING_FOR_APPROVAL:
        return "await_approval"
    if status == S.RUNNING and not for_new_run:
        return "in_progress"
    if pending.any_attempted:
        return "reconcile"
    if status == S.BLOCKED:
        return "retry_external"
    return "resume"


def status_label(status: str, *, waits_for_review: bool) -> str:
    """The status as a person reads it. `waiting_for_approval` names what waits: a milestone gate
    is a review, not an approval of an action."""
    if status == S.WAITING_FOR_APPROVAL and waits_for_review:
        return "Waiting for your review"
    return status.replace("_", " ").capitalize()


def message(mission: Mission, action: str, pending: Pending) -> str:
    """The plain sentence a person reads for the mission's current state."""
    detail = mission.stop_detail.strip().rstrip(".")
    if action == "none":
        return "Quest complete." if mission.status == S.COMPLETED else "Cancelled; nothing more will run."
    if action == "await_user":
        if mission.status == S.PAUSED:
            return "Paused by you. Resume it when you are ready."
        return f"Failed after using its retry budget{': ' + detail if detail else ''}. It needs you to look at it."
    if action == "await_approval":
        if pending.approval_action:
            return f"Waiting for your approval to {pending.approval_action}"
        if pending.milestone_title:
            return f"Waiting for your review of “{pending.milestone_title}”"
        return "Waiting for your approval"
    if action == "in_progress":
        return f"Running now (run {pending.run_number})." if pending.run_number else "Running now."
    if action == "reconcile":
        return "Some side effects were attempted but not confirmed: check them before anything else is done."
    if action == "retry_external":
        sentence = f"Blocked: {detail or 'an external service is unavailable'}"
        if mission.retry_at:
            sentence += f", retrying after {moment(mission.retry_at)}"
        return sentence
    if mission.stop_reason == StopReason.INTERRUPTED:
        return "The last run stopped unexpectedly; the next run resumes from the last checkpoint."
    if mission.run_count == 0:
        return "Ready to start."
    return "Ready to resume from the last checkpoint."
