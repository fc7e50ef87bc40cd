"""Milestones: the agent claims a meaningful step with its evidence, and a person reviews it
(approve, correct or pause). A gated milestone stops the run until the review."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from checkpoints.models import Checkpoint
from notifications import events as notify
from quests.engine import writes
from quests.models import Milestone, MilestoneKind, Mission, ReviewStatus
from quests.services import idempotency, machine, tokens
from quests.services.approvals import locked_for_person, person_act, settle, wait_for_the_person
from quests.services.audit import Actor, audit
from quests.services.checkpointing import take_checkpoint
from quests.services.errors import InvalidInput
from quests.services.locking import refuse_unless_active
from quests.services.missions import _pause, constraint_from_correction
from quests.services.snapshots import state_changed

# review action -> the review status it gives the milestone (`pause` leaves it pending)
REVIEWS = {"approve": ReviewStatus.APPROVED, "correct": ReviewStatus.CORRECTED}


@idempotency.retried_on_key_race
def milestone_claim(
    *,
    actor: Actor | writes.Credentials,
    run_id: int,
    kind: str,
    title: str,
    summary: str = "",
    evidence: list[int] | None = None,
    gate: bool = False,
    agent_state: dict[str, Any] | None = None,
    key: str | None = None,
) -> tuple[Milestone, bool]:
    if kind not in MilestoneKind.values:
        raise InvalidInput(f"Unknown milestone kind “{kind}”.", field="kind")
    body = {"kind": kind, "title": title, "summary": summary, "evidence": evidence or [], "gate": gate, "agent_state": agent_state}
    keyed = idempotency.keyed("milestones", key, body)
    with transaction.atomic():
        actor, locked = tokens.run_locked_for(actor, run_id, keyed)
        run, mission = locked.run, locked.mission
        replayed = idempotency.replayed(keyed, locked.replay)
        if replayed is not None:
            return Milestone.objects.get(pk=replayed), True
        refuse_unless_active(run, mission)  # fencing; the run's heartbeat goes with the checkpoint below
        evidence = evidence or []
        if evidence and mission.records.filter(pk__in=evidence).count() != len(set(evidence)):
            raise InvalidInput("Evidence must name records of this mission.", field="evidence")
        milestone = Milestone.objects.create(mission=mission, run=run, kind=kind, title=title, summary=summary, evidence=evidence, gate=gate)
        audit(actor=actor, mission=mission, entity="milestone", entity_id=milestone.pk, action="claim", to_state="pending_review", gate=gate)
        notify.notify_milestone_claimed(mission, milestone)
        if gate:
            wait_for_the_person(mission, run, actor, f"Waiting for your review of “{title}”")
        milestone.checkpoint = take_checkpoint(mission, trigger="milestone", run=run, agent_state=agent_state, changed="milestone.claimed", beat=True)
        milestone.save(update_fields=["checkpoint"])
        state_changed(mission, "milestone.claimed", key=keyed, made_id=milestone.pk)  # the key remembered with the save
        return milestone, False


def milestone_review(*, actor: Actor, milestone_id: int, action: str, note: str = "") -> Milestone:
    """Approve (the checkpoint becomes verified), correct (the note becomes a constraint), or pause
    the mission (the milestone stays pending review). Text sent with Approve becomes a constraint
    too: approved, with a correction for what comes next."""
    with transaction.atomic():
        milestone, mission = locked_for_person(actor, Milestone, milestone_id)
        machine.require(milestone, "approve")
        if action == "pause":
            _pause(mission, actor=actor)
            return milestone
        if action not in REVIEWS:
            raise InvalidInput("action must be approve, correct or pause.", field="action")
        correction = (note or "").strip()
        if action == "correct" and not correction:
            raise InvalidInput("A correction needs a note: it becomes a constraint the agent must follow.", field="note")
        # A review's text is always a correction the agent must follow, with Approve too: text that
        # bound no one would read as if it did.
        if correction:
            constraint_from_correction(mission, note=correction, actor=actor)
        if action == "approve" and milestone.checkpoint_id:
            _verify(mission, milestone.checkpoint_id)
        milestone.note = note or ""
        milestone.reviewed_at = timezone.now()
        milestone.reviewed_by = actor.user
        machine.move(
            milestone,
            event=action,
            to=REVIEWS[action],
            actor=actor,
            mission=mission,
            fields=("note", "reviewed_at", "reviewed_by"),
            **person_act(milestone.title, note),
        )
        settle(mission, actor=actor)
        state_changed(mission, "milestone.reviewed")
        return milestone


def _verify(mission: Mission, checkpoint_id: int) -> None:
    checkpoint = Checkpoint.objects.get(pk=checkpoint_id)
    Checkpoint.objects.filter(pk=checkpoint_id).update(verified=True, verified_at=timezone.now())
    current = mission.last_verified_checkpoint
    if current is None or current.seq < checkpoint.seq:
        mission.last_verified_checkpoint = checkpoint
        mission.save(update_fields=["last_verified_checkpoint", "updated_at"])
