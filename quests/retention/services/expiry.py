"""When a mission's working state expires, and the owner's choice to keep a quest's history.

A working row's expiry is its mission's: the mission's `expires_at` decides, and it is copied
onto the rows (`_stamp_rows`) so each one carries it."""

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, OperationEvent, Record, RetentionClass, RetentionPolicy
from quests.engine import lifecycle, runner
from quests.models import TERMINAL_STATUSES, Approval, Constraint, MemoryItem, MemoryProposal, Milestone, Mission
from quests.retention.services.holds import held_mission_ids, held_user_ids
from quests.services.access import get_for, require_person
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict

# How each model that holds a mission's working state reaches its mission.
WORKING_STATE: tuple[tuple[type[Model], str], ...] = (
    (Checkpoint, "mission_id"),
    (Record, "mission_id"),
    (Operation, "mission_id"),
    (OperationEvent, "operation__mission_id"),
    (Constraint, "mission_id"),
    (Approval, "mission_id"),
    (Milestone, "mission_id"),
    (MemoryProposal, "mission_id"),
)


def mission_expiry(mission: Mission, policy: RetentionPolicy | None = None) -> datetime | None:
    """Nothing of an active mission expires. An ended one keeps its working state for the grace
    period; if its owner chose to keep its history, for the approved maximum counted from the
    later of the end and that choice."""
    if mission.ended_at is None:
        return None
    policy = policy or RetentionPolicy.current()
    if mission.retention_approved_at is not None:
        start = max(mission.ended_at, mission.retention_approved_at)
        return start + timedelta(days=policy.approved_max_days)
    return mission.ended_at + timedelta(days=policy.grace_days)


def retention_mission_ended(mission: Mission) -> list[str]:
    """Called by the state machine when a mission ends (its row locked, `ended_at` set). Sets the
    expiry and returns the fields to save; the rows get it once the transaction commits, so the
    stop checkpoint written after the transition in the same transaction is stamped too."""
    mission.expires_at = mission_expiry(mission)
    mission_id = mission.pk
    transaction.on_commit(lambda: _stamp_rows(mission_id))
    return ["expires_at"]


def _stamp_rows(mission_id: int) -> None:
    if runner.is_postgresql():
        # One statement, the mission's row locked first (quests.engine.sql.lifecycle says why).
        lifecycle.stamp_working_state(mission_id)
        return
    mission = Mission.objects.filter(pk=mission_id).values("expires_at", "retention_approved_at").first()
    if mission is None:
        return
    for model, path in WORKING_STATE:
        model._default_manager.filter(**{path: mission_id}, retention_class=RetentionClass.WORKING).update(
            expires_at=mission["expires_at"], retention_approved_at=mission["retention_approved_at"]
        )


def retention_keep(*, actor: Actor, mission_id: int) -> Mission:
    """The owner keeps this quest's history: recorded with the time, expiry moves to the policy's
    maximum for approved state (applied from the end, while the quest is still active)."""
    with transaction.atomic():
        mission = _owned_unpurged(actor, mission_id)
        if mission.retention_approved_at is not None:
            raise Conflict("You already chose to keep this quest's history.", code="invalid_transition")
        mission.retention_approved_at = timezone.now()
        return _save_retention(mission, actor=actor, action="keep_history", from_state="working", to_state="kept")


def retention_withdraw(*, actor: Actor, mission_id: int) -> Mission:
    with transaction.atomic():
        mission = _owned_unpurged(actor, mission_id)
        if mission.retention_approved_at is None:
            raise Conflict("You have not chosen to keep this quest's history.", code="invalid_transition")
        mission.retention_approved_at = None
        return _save_retention(mission, actor=actor, action="withdraw_keep", from_state="kept", to_state="working")


def _owned_unpurged(actor: Actor, mission_id: int) -> Mission:
    require_person(actor)
    mission = get_for(actor, Mission, mission_id, for_update=True)
    if mission.purged_at is not None:
        raise Conflict("This quest's history was already deleted.", code="invalid_transition")
    return mission


def _save_retention(mission: Mission, *, actor: Actor, action: str, from_state: str, to_state: str) -> Mission:
    mission.expires_at = mission_expiry(mission)
    mission.save(update_fields=["retention_approved_at", "expires_at", "updated_at"])
    _stamp_rows(mission.pk)
    audit(
        actor=actor,
        mission=mission,
        entity="mission",
        entity_id=mission.pk,
        action=action,
        from_state=from_state,
        to_state=to_state,
        expires_at=mission.expires_at.isoformat() if mission.expires_at else None,
    )
    return mission


def expiring_soon(*, now: datetime | None = None, days: int = 7) -> dict[str, Any]:
    """What the next purges will delete within `days`, per retention class (held state excluded,
    and counted apart so staff see what their holds keep)."""
    now = now or timezone.now()
    until = now + timedelta(days=days)
    missions = Mission.objects.filter(purged_at__isnull=True, status__in=TERMINAL_STATUSES, expires_at__lte=until)
    free = missions.exclude(pk__in=held_mission_ids()).exclude(owner_id__in=held_user_ids())
    ids = free.values("pk")
    memory = MemoryItem.objects.filter(expires_at__lte=until)
    return {
        "until": until,
        "working": {
            "missions": free.count(),
            "checkpoints": Checkpoint.objects.filter(mission_id__in=ids).count(),
            "records": Record.objects.filter(mission_id__in=ids).count(),
            "operations": Operation.objects.filter(mission_id__in=ids).count(),
            "approvals": Approval.objects.filter(mission_id__in=ids).count(),
            "memory_proposals": MemoryProposal.objects.filter(mission_id__in=ids).count(),
            "held_missions": missions.count() - free.count(),
        },
        "long_term": {
            "memory_items": memory.exclude(owner_id__in=held_user_ids()).count(),
            "held_memory_items": memory.filter(owner_id__in=held_user_ids()).count(),
        },
    }
