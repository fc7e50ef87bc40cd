"""Approvals: the moments a person decides whether an action may happen (milestones, the other
kind of moment, are in quests.services.milestones and share the prologue here)."""

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from checkpoints import sections
from notifications import events as notify
from quests import limits
from quests.engine import writes
from quests.models import Approval, ApprovalStatus, AuditEvent, Milestone, Mission, MissionStatus, Run, StopReason
from quests.selectors import compare
from quests.services import idempotency, machine, tokens
from quests.services.access import get_for, require_person
from quests.services.audit import SYSTEM, Actor, audit_event
from quests.services.checkpointing import take_checkpoint
from quests.services.errors import Conflict, InvalidInput, require_within
from quests.services.locking import lock_mission, refuse_unless_active
from quests.services.missions import has_pending
from quests.services.runs import run_end
from quests.services.savestate import apply_sections, ensure_current, read_sections
from quests.services.snapshots import state_changed
from quests.services.standing import standing_decision_make, standing_decisions_apply

# decision -> the status it gives the approval
DECISIONS = {"approve": ApprovalStatus.APPROVED, "edit": ApprovalStatus.EDITED, "reject": ApprovalStatus.REJECTED}


def settle(mission: Mission, *, actor: Actor) -> None:
    """When nothing is pending any more, a mission waiting for approval is ready again."""
    if mission.status == MissionStatus.WAITING_FOR_APPROVAL and not has_pending(mission):
        machine.transition(mission, event="settle", to=MissionStatus.READY, actor=actor)


def approval_request(
    *,
    actor: Actor | writes.Credentials,
    run_id: int,
    action: str,
    payload: dict[str, Any],
    reason: str,
    agent_state: dict[str, Any] | None = None,
    respond_by: datetime | None = None,
    key: str | None = None,
    agent_ref: str = "",
) -> tuple[Approval, bool]:
    """The agent asks a person; its run ends `waiting_for_approval` and a checkpoint holds the
    agent's state, so tomorrow's run resumes the same mission, knowing why it asked."""
    # The request body as the agent sent it (the API calls the deadline `expires_at`).
    body = {"action": action, "payload": payload, "reason": reason, "agent_state": agent_state, "expires_at": respond_by}
    if agent_ref:
        body["agent_ref"] = agent_ref
    item = {"action": action, "payload": payload, "reason": reason, "respond_by": respond_by, "agent_ref": agent_ref}
    approvals, replayed = _request(actor=actor, run_id=run_id, items=[item], agent_state=agent_state, key=key, body=body)
    return approvals[0], replayed


def approvals_request(
    *, actor: Actor | writes.Credentials, run_id: int, items: list[dict[str, Any]], agent_state: dict[str, Any] | None = None, key: str | None = None
) -> tuple[list[Approval], bool]:
    """Several questions at once (tools an agent wants to call in parallel, interrupts of parallel
    graph nodes): each becomes an approval, and the run ends once, waiting for all of them. Each
    item has `action`, `payload`, `reason`, and optionally `respond_by` and `agent_ref` (the
    agent's own id for what it asks: a tool call id, an interrupt id)."""
    if not items:
        raise InvalidInput("Ask at least one question.", field="items")
    body = {"items": items, "agent_state": agent_state}
    return _request(actor=actor, run_id=run_id, items=items, agent_state=agent_state, key=key, body=body)


@idempotency.retried_on_key_race
def _request(
    *, actor: Actor | writes.Credentials, run_id: int, items: list[dict[str, Any]], agent_state: dict[str, Any] | None, key: str | None, body: dict[str, Any]
) -> tuple[list[Approval], bool]:
    """Authenticate and lock (an agent token's `Credentials` are checked by the lock's own
    statement: `tokens.run_locked_for`), replay on key, fence, ask, end the run, checkpoint."""
    keyed = idempotency.keyed("approvals", key, body)
    with transaction.atomic():
        actor, locked = tokens.run_locked_for(actor, run_id, keyed)
        run, mission = locked.run, locked.mission
        replayed = idempotency.replayed(keyed, locked.replay)
        if replayed is not None:
            # A batch's approvals were created one after another under the mission's lock.
            return list(Approval.objects.filter(mission_id=mission.pk, pk__gte=replayed).order_by("pk")[: len(items)]), True
        refuse_unless_active(run, mission)  # fencing; the run's heartbeat goes with the checkpoint below
        approvals = _ask(actor, mission, run, items)
        actions = ", ".join(approval.action for approval in approvals)
        wait_for_the_person(mission, run, actor, f"Waiting for approval to {actions}")
        applied = _checkpoint(mission, run, approvals, agent_state)
        # Every question a standing decision answered: nothing waits, the next run may start. One
        # of these still pending says the mission waits, with no need to look.
        if all(approval.status != ApprovalStatus.PENDING for approval in approvals):
            settle(mission, actor=actor)
        state_changed(mission, "approval", applied=applied, key=keyed, made_id=approvals[0].pk)  # the key remembered with the save
        return approvals, False


def wait_for_the_person(mission: Mission, run: Run, actor: Actor, detail: str) -> None:
    """The run stops where it is: the mission waits for a person's answer (an approval or a
    gated milestone's review), and the next run starts from it."""
    run_end(
        mission,
        run,
        event="await_approval",
        to=MissionStatus.WAITING_FOR_APPROVAL,
        stop_reason=StopReason.WAITING_FOR_APPROVAL,
        detail=detail,
        actor=actor,
        checkpoint=False,
    )


def approvals_add_while_waiting(*, actor: Actor, mission: Mission, items: list[dict[str, Any]]) -> list[Approval]:
    """More questions for a mission (locked by the caller) that already waits for a person and has
    no run: a LangGraph thread invoked again before the decision, stopping at a new interrupt."""
    if mission.status != MissionStatus.WAITING_FOR_APPROVAL:
        raise Conflict("Only a mission waiting for approval can be asked more without a run.", code="invalid_transition", status=mission.status)
    approvals = _ask(actor, mission, None, items)
    applied = _checkpoint(mission, None, approvals, None)
    settle(mission, actor=actor)
    state_changed(mission, "approval", applied=applied)
    return approvals


def _ask(actor: Actor, mission: Mission, run: Run | None, items: list[dict[str, Any]]) -> list[Approval]:
    # Two statements whatever the number of items (a batch may hold APPROVAL_BATCH_ITEMS_MAX); the
    # approvals' ids follow the items' order, which a replay of the batch relies on.
    approvals = Approval.objects.bulk_create(
        Approval(
            mission=mission,
            run=run,
            action=item["action"],
            payload=item["payload"],
            reason=item["reason"],
            respond_by=item.get("respond_by"),
            agent_ref=item.get("agent_ref") or "",
            node=item.get("node") or "",
            question=item.get("question"),
        )
        for item in items
    )
    AuditEvent.objects.bulk_create(
        audit_event(actor=actor, mission=mission, entity="approval", entity_id=approval.pk, action="request", to_state="pending") for approval in approvals
    )
    standing_decisions_apply(actor=actor, mission=mission, approvals=approvals)
    notify.notify_approvals_requested(mission, approvals)
    return approvals


def _checkpoint(mission: Mission, run: Run | None, approvals: list[Approval], agent_state: dict[str, Any] | None) -> bool:
    """The checkpoint the questions were asked at, which each approval then names. The sections an
    approval changes are read once, before it: the checkpoint holds them as asked, and the current
    document the same rows naming the checkpoint, given in memory. Says whether the current
    document holds them so (else the caller's save reads them: a document just rebuilt)."""
    rebuilt = ensure_current(mission)
    read = {} if rebuilt else read_sections(mission.pk, sections.touched("approval"))
    apply_sections(mission, read)
    checkpoint = take_checkpoint(mission, trigger="approval", run=run, agent_state=agent_state, beat=True)
    Approval.objects.filter(pk__in=[approval.pk for approval in approvals]).update(checkpoint=checkpoint)
    for approval in approvals:
        approval.checkpoint = checkpoint
    asked = {approval.pk for approval in approvals}
    for row in read.get("approvals", []):
        if row["id"] in asked:
            row["checkpoint_id"] = checkpoint.pk
    apply_sections(mission, read)
    return not rebuilt


def locked_for_person[T: (Approval, Milestone)](actor: Actor, model: type[T], pk: int) -> tuple[T, Mission]:
    """What a person acts on, with its mission's row locked and itself read again under the lock:
    two people deciding at once are serialised, and the second sees what the first did (409)."""
    require_person(actor)
    item = get_for(actor, model, pk)
    mission = lock_mission(item.mission_id)
    item.refresh_from_db()
    return item, mission


def approval_decide(*, actor: Actor, approval_id: int, decision: str, payload: dict[str, Any] | None = None, note: str = "", always: bool = False) -> Approval:
    """A person's decision. `always` makes it stand for every request of the same action in this
    mission (the pending ones and those asked later) until revoked; an edit is one call's."""
    with transaction.atomic():
        approval, mission = locked_for_person(actor, Approval, approval_id)
        _require_undecided(approval, mission)
        if decision not in DECISIONS:
            raise InvalidInput("decision must be approve, reject or edit.", field="decision")
        if always and decision == "edit":
            raise InvalidInput("An edit answers one call: approve or reject always, or edit this call only.", field="always")
        if decision == "edit":
            if not isinstance(payload, dict):
                raise InvalidInput("Edit and approve needs the changed payload as a JSON object.", field="payload")
            # Nothing was changed: the history says what happened, an approval as asked.
            if payload == approval.payload:
                decision = "approve"
            approval.decided_payload = payload
        if decision == "approve":
            approval.decided_payload = approval.payload
        require_within(note or "", limits.DECISION_NOTE, what="A note", field="note")
        approval.note = note or ""
        approval.decided_at = timezone.now()
        approval.decided_by = actor.user
        machine.move(
            approval,
            event=decision,
            to=DECISIONS[decision],
            actor=actor,
            mission=mission,
            fields=("decided_payload", "note", "decided_at", "decided_by"),
            **person_act(approval.action, note, approval, decision),
        )
        if always:
            standing_decision_make(actor=actor, mission=mission, approval=approval)
        settle(mission, actor=actor)
        state_changed(mission, "approval")
        return approval


def _require_undecided(approval: Approval, mission: Mission) -> None:
    """Refuse a decision on an approval that is no longer pending, saying why: one that ended with
    its quest was withdrawn, not left to run out."""
    ran_out = approval.respond_by is not None and approval.decided_at is not None and approval.decided_at >= approval.respond_by
    if approval.status == ApprovalStatus.EXPIRED and mission.status in (MissionStatus.CANCELLED, MissionStatus.COMPLETED) and not ran_out:
        ended = "cancelled" if mission.status == MissionStatus.CANCELLED else "completed"
        raise Conflict(
            f"This approval was withdrawn because the quest was {ended}. Nothing was decided.",
            code="invalid_transition",
            status=approval.status,
        )
    machine.require(approval, "approve")


def undo_until(approval: Approval) -> datetime | None:
    """Until when a decided approval may be taken back (if no run starts first)."""
    if approval.decided_at is None:
        return None
    return approval.decided_at + timedelta(seconds=settings.QUESTLOG_UNDO_SECONDS)


def run_started_since_decision() -> Exists:
    """Whether a run of the approval's mission started at or after its decision (an expression over
    Approval rows): from then on the agent may have acted on it."""
    return Exists(Run.objects.filter(mission_id=OuterRef("mission_id"), started_at__gte=OuterRef("decided_at")))


def undo_refusal(approval: Approval, mission: Mission, *, by: Any, now: datetime | None = None, run_since: bool | None = None) -> Conflict | None:
    """Why this decided approval may not be undone now by `by`, or None when it may: the one rule,
    asked by approval_undo under the mission's lock and by the pages that offer an Undo button
    (which read `run_since` along with the approval, as run_started_since_decision())."""
    if approval.status not in machine.APPROVAL_TRANSITIONS["undo"][0]:
        return Conflict(f"This approval is {approval.status}; there is no decision to undo.", code="invalid_transition", status=approval.status)
    if approval.decided_by_id != getattr(by, "pk", None):
        return Conflict("Only the person who decided can undo the decision.", code="undo_refused")
    deadline = undo_until(approval)
    if deadline is None or (now or timezone.now()) > deadline:
        return Conflict(
            f"Too late to undo: a decision can be taken back within {settings.QUESTLOG_UNDO_SECONDS} seconds.",
            code="undo_expired",
        )
    if run_since is None:
        run_since = Approval.objects.filter(pk=approval.pk).filter(run_started_since_decision()).exists()
    if mission.active_run_id is not None or run_since:
        return Conflict("Too late to undo: the agent has already started a run and may have acted on your decision.", code="run_started")
    if mission.is_terminal:
        return Conflict(f"This quest is {mission.status}; its decisions can no longer be undone.", code="undo_refused")
    return None


def approval_undo(*, actor: Actor, approval_id: int, now: datetime | None = None) -> Approval:
    """Take back a decision the agent has not acted on: within QUESTLOG_UNDO_SECONDS of it, by the
    person who made it, and only while no run has started since. The approval is pending again and
    a ready mission waits for the person again; the decision and its undoing stay in the history."""
    with transaction.atomic():
        # A run start locks the same row (runs.run_start): an undo and a run start at once are
        # serialised, and whichever comes second sees what the first did — a run that started
        # (the undo is refused) or a mission waiting for a person again (the start is refused).
        approval, mission = locked_for_person(actor, Approval, approval_id)
        refusal = undo_refusal(approval, mission, by=actor.user, now=now)
        if refusal is not None:
            raise refusal
        undone = approval.status
        approval.decided_payload = None
        approval.note = ""
        approval.decided_at = None
        approval.decided_by = None
        machine.move(
            approval,
            event="undo",
            to=ApprovalStatus.PENDING,
            actor=actor,
            mission=mission,
            fields=("decided_payload", "note", "decided_at", "decided_by"),
            undone=undone,
            subject=approval.action,
        )
        if mission.status == MissionStatus.READY:
            machine.transition(mission, event="unsettle", to=MissionStatus.WAITING_FOR_APPROVAL, actor=actor)
        state_changed(mission, "approval")
        return approval


# What the history keeps of a person's act, bounded: its notes and an edit's changes are read on
# the mission's timeline, and an audit row must not grow with a large payload.
HISTORY_TEXT = 500
HISTORY_CHANGES = 20


def _short(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return value[:HISTORY_TEXT] if isinstance(value, str) else value


def person_act(subject: str, note: str, approval: Approval | None = None, decision: str = "") -> dict[str, Any]:
    """The audit data of a decision or review: what it was about, the person's note and, for an
    edit, each changed value before and after (so the timeline shows them after an undo, too)."""
    data: dict[str, Any] = {"subject": subject[:HISTORY_TEXT]}
    if note:
        data["note"] = note[:HISTORY_TEXT]
    if approval is not None and decision == "edit":
        data["changes"] = [
            {"what": change.key, "before": _short(change.old), "after": _short(change.new)}
            for change in compare.diff({"payload": approval.payload}, {"payload": approval.decided_payload})[:HISTORY_CHANGES]
        ]
    return data


def approvals_expire_due(now: datetime | None = None) -> int:
    """Approvals past their `respond_by` deadline become `expired`; their missions become ready."""
    now = now or timezone.now()
    count = 0
    due = Approval.objects.filter(status=ApprovalStatus.PENDING, respond_by__lte=now).values_list("pk", "mission_id")
    for approval_id, mission_id in due:
        with transaction.atomic():
            mission = lock_mission(mission_id)
            approval = Approval.objects.get(pk=approval_id)
            if approval.status != ApprovalStatus.PENDING:
                continue
            approval.decided_at = now
            machine.move(approval, event="expire", to=ApprovalStatus.EXPIRED, actor=SYSTEM, mission=mission, fields=("decided_at",))
            settle(mission, actor=SYSTEM)
            state_changed(mission, "approval")
            count += 1
    return count
