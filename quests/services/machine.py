"""The mission state machine: the one table of allowed transitions, the one function that applies
them (with its audit event), and the next action / plain-language message that follow from state."""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from quests.models import Mission, MissionStatus as S, StopReason
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict

# event -> (statuses it may start from, statuses it may lead to)
TRANSITIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "start_run": (frozenset({S.READY, S.BLOCKED}), frozenset({S.RUNNING})),
    "interrupt": (frozenset({S.RUNNING}), frozenset({S.READY})),
    "await_approval": (frozenset({S.RUNNING}), frozenset({S.WAITING_FOR_APPROVAL})),
    "settle": (frozenset({S.WAITING_FOR_APPROVAL}), frozenset({S.READY})),
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

# How a run's stop reason moves the mission (the stop call and the people-only actions).
STOP_EVENTS: dict[str, tuple[str, str]] = {
    StopReason.BLOCKED_EXTERNAL: ("stop_blocked", S.BLOCKED),
    StopReason.FAILED_RETRY_BUDGET: ("stop_failed", S.FAILED),
    StopReason.COMPLETED: ("complete", S.COMPLETED),
}

NOT_STARTABLE = frozenset({S.WAITING_FOR_APPROVAL, S.PAUSED, S.FAILED, S.CANCELLED, S.COMPLETED})


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
) -> None:
    """Apply one transition to a mission whose row the caller holds locked."""
    froms, tos = TRANSITIONS[event]
    if mission.status not in froms or to not in tos:
        raise Conflict(
            f"A mission that is {mission.status.replace('_', ' ')} cannot {event.replace('_', ' ')}.",
            code="invalid_transition",
            status=mission.status,
        )
    previous = mission.status
    mission.status = to
    fields = ["status", "updated_at", "state_version"]
    if stop_reason is not None:
        mission.stop_reason = stop_reason
        mission.stop_detail = detail or ""
        mission.retry_at = retry_at
        fields += ["stop_reason", "stop_detail", "retry_at"]
    if to in (S.CANCELLED, S.COMPLETED):
        mission.ended_at = timezone.now()
        fields.append("ended_at")
        # The one place missions end: from here their working state starts to expire.
        from quests.retention.services.expiry import retention_mission_ended

        fields += retention_mission_ended(mission)
    mission.state_version += 1
    mission.save(update_fields=fields)
    audit(
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
            sentence += f", retrying after {timezone.localtime(mission.retry_at):%H:%M}"
        return sentence
    if mission.stop_reason == StopReason.INTERRUPTED:
        return "The last run stopped unexpectedly; the next run resumes from the last checkpoint."
    if mission.run_count == 0:
        return "Ready to start."
    return "Ready to resume from the last checkpoint."
