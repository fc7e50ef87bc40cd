"""Retention: how long a mission's working state is kept, the owner's choice to keep it, staff
policy and holds, the purge that deletes what has expired, and a person's export of their data.

The seed's privacy rule in one place: recoverable working state disappears once its quest has
ended (after the staff's grace period), long-term memory holds only what a person chose to keep,
and nothing held by staff is ever purged. A working row's expiry is its mission's: the mission's
`expires_at` decides, and it is copied onto the rows (`_stamp_rows`) so each one carries it."""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Exists, Model, OuterRef, Q, QuerySet
from django.utils import timezone

from checkpoints.models import (
    Blob,
    Checkpoint,
    Operation,
    OperationEvent,
    PurgeLog,
    Record,
    RetentionClass,
    RetentionPolicy,
    SnapshotRequest,
)
from checkpoints.pruning import blobs_collect_garbage
from checkpoints.services import blobs_get, checkpoint_documents
from quests import serializers as ser
from quests.models import (
    TERMINAL_STATUSES,
    AgentToken,
    Approval,
    AuditEvent,
    Constraint,
    Hold,
    IdempotentRequest,
    MemoryItem,
    MemoryProposal,
    Milestone,
    Mission,
    Run,
)
from quests.services.access import get_for, require_person
from quests.services.audit import SYSTEM, Actor, audit
from quests.services.errors import Conflict, InvalidInput, NotFound

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

POLICY_FIELDS = ("grace_days", "approved_max_days", "memory_max_days", "snapshot_prune_days", "snapshot_keep_newest", "purge_batch_size")

# Audit data keys that carry what a person or agent wrote; a purge removes them with the rest of
# the working state and keeps who did what, when, and from which state to which.
AUDIT_CONTENT_KEYS = ("text", "detail", "note", "payload")


# ---------------------------------------------------------------------------------------------
# Expiry


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
    mission = Mission.objects.filter(pk=mission_id).values("expires_at", "retention_approved_at").first()
    if mission is None:
        return
    for model, path in WORKING_STATE:
        model.objects.filter(**{path: mission_id}, retention_class=RetentionClass.WORKING).update(
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
        actor=actor, mission=mission, entity="mission", entity_id=mission.pk, action=action,
        from_state=from_state, to_state=to_state, expires_at=ser.iso(mission.expires_at),
    )
    return mission


# ---------------------------------------------------------------------------------------------
# Staff: policy and holds


def require_staff(actor: Actor) -> None:
    """Staff pages and actions do not exist for anyone else (404, like another user's object)."""
    user = actor.user
    if actor.token is not None or actor.system or user is None or not user.is_active or not user.is_staff:
        raise NotFound("No such page.")


def retention_policy_update(*, actor: Actor, **values: int) -> RetentionPolicy:
    """Staff change the policy in force. Expiries already set are kept; the new grace period
    applies to quests that end (or change their keep choice) from now on."""
    require_staff(actor)
    unknown = set(values) - set(POLICY_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown policy field {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"{name} must be a whole number of zero or more.", field=name)
    if values.get("purge_batch_size") == 0:
        raise InvalidInput("purge_batch_size must be at least 1.", field="purge_batch_size")
    with transaction.atomic():
        policy = RetentionPolicy.current()
        policy = RetentionPolicy.objects.select_for_update().get(pk=policy.pk)
        before = {name: getattr(policy, name) for name in POLICY_FIELDS}
        for name, value in values.items():
            setattr(policy, name, value)
        policy.updated_by = actor.user
        policy.save()
        changed = {name: [before[name], getattr(policy, name)] for name in POLICY_FIELDS if before[name] != getattr(policy, name)}
        audit(actor=actor, mission=None, entity="retention_policy", entity_id=policy.pk, action="update", changes=changed)
        return policy


def hold_place(*, actor: Actor, reason: str, mission_id: int | None = None, username: str | None = None) -> Hold:
    """A staff hold on one mission or on everything of one user: held state is never purged."""
    require_staff(actor)
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A hold needs a reason.", field="reason")
    if (mission_id is None) == (not username):
        raise InvalidInput("Name either a quest or a user to hold.", field="mission_id")
    with transaction.atomic():
        mission = user = None
        if mission_id is not None:
            # The mission's row lock orders the hold with a purge of the same mission.
            mission = Mission.objects.select_for_update().filter(pk=mission_id).first()
            if mission is None:
                raise InvalidInput(f"There is no quest with id {mission_id}.", field="mission_id")
        else:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise InvalidInput(f"There is no user “{username}”.", field="username")
        hold = Hold.objects.create(mission=mission, user=user, reason=reason, placed_by=actor.user)
        audit(
            actor=actor, mission=mission, entity="hold", entity_id=hold.pk, action="place", to_state="active",
            user=user.get_username() if user else None,
        )
        return hold


def hold_release(*, actor: Actor, hold_id: int) -> Hold:
    require_staff(actor)
    with transaction.atomic():
        hold = Hold.objects.select_for_update().filter(pk=hold_id).first()
        if hold is None:
            raise NotFound(f"No hold with id {hold_id}.")
        if hold.released_at is not None:
            raise Conflict("This hold was already released.", code="invalid_transition")
        hold.released_at = timezone.now()
        hold.save(update_fields=["released_at"])
        audit(actor=actor, mission=hold.mission, entity="hold", entity_id=hold.pk, action="release", from_state="active", to_state="released")
        return hold


def active_holds() -> QuerySet[Hold]:
    return Hold.objects.filter(released_at__isnull=True).select_related("mission", "user", "placed_by").order_by("-created_at", "-id")


def _held_mission_ids() -> QuerySet:
    return Hold.objects.filter(released_at__isnull=True, mission__isnull=False).values("mission_id")


def _held_user_ids() -> QuerySet:
    return Hold.objects.filter(released_at__isnull=True, user__isnull=False).values("user_id")


def is_held(mission: Mission) -> bool:
    return Hold.objects.filter(Q(mission=mission) | Q(user_id=mission.owner_id), released_at__isnull=True).exists()


def expiring_soon(*, now: datetime | None = None, days: int = 7) -> dict[str, Any]:
    """What the next purges will delete within `days`, per retention class (held state excluded,
    and counted apart so staff see what their holds keep)."""
    now = now or timezone.now()
    until = now + timedelta(days=days)
    missions = Mission.objects.filter(purged_at__isnull=True, status__in=TERMINAL_STATUSES, expires_at__lte=until)
    free = missions.exclude(pk__in=_held_mission_ids()).exclude(owner_id__in=_held_user_ids())
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
            "memory_items": memory.exclude(owner_id__in=_held_user_ids()).count(),
            "held_memory_items": memory.filter(owner_id__in=_held_user_ids()).count(),
        },
    }


# ---------------------------------------------------------------------------------------------
# Purge


@dataclass(frozen=True)
class PurgeScope:
    as_of: datetime
    batch_size: int
    actor: Actor
    # The owner's "delete now": exactly these missions, whatever their expiry; no memory items.
    mission_ids: tuple[int, ...] | None = None


def retention_purge(
    *,
    as_of: datetime | None = None,
    dry_run: bool = False,
    trigger: str = "schedule",
    actor: Actor = SYSTEM,
    mission_ids: Iterable[int] | None = None,
) -> PurgeLog:
    """Delete expired working state (and expired memory items) in batches, each batch one
    transaction, and write a purge log. A dry run goes through exactly the same steps inside one
    transaction that is rolled back, so its counts are what a real run would delete."""
    policy = RetentionPolicy.current()
    scope = PurgeScope(
        as_of=as_of or timezone.now(), batch_size=max(policy.purge_batch_size, 1), actor=actor,
        mission_ids=tuple(mission_ids) if mission_ids is not None else None,
    )
    log = PurgeLog.objects.create(
        policy=policy, policy_snapshot={name: getattr(policy, name) for name in POLICY_FIELDS}, as_of=scope.as_of,
        dry_run=dry_run, counts={}, trigger=trigger, actor=actor.label,
    )
    try:
        if dry_run:
            with transaction.atomic():
                counts = _purge_batches(scope, log_id=None)
                transaction.set_rollback(True)
        else:
            counts = _purge_batches(scope, log_id=log.pk)
    except Exception as exc:
        # The batches that committed are already in the log's counts; this one left nothing.
        PurgeLog.objects.filter(pk=log.pk).update(error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    log.counts = dict(counts)
    log.finished_at = timezone.now()
    log.save(update_fields=["counts", "finished_at"])
    return log


def _purge_batches(scope: PurgeScope, *, log_id: int | None) -> Counter:
    total: Counter = Counter()
    for batch in (_purge_mission_batch, _purge_memory_batch):
        while True:
            with transaction.atomic():
                counts = batch(scope)
                if counts and log_id is not None:
                    PurgeLog.objects.filter(pk=log_id).update(counts=dict(total + counts))
            if not counts:
                break
            total += counts
    return total


def purgeable_missions(scope: PurgeScope) -> QuerySet[Mission]:
    """Ended and not held; expired (or named by their owner's "delete now") and not yet purged,
    or purged but written to since: receipts are accepted whatever the mission's state, so a
    late receipt (and the snapshot or constraint that follows it) is purged on the next run."""
    qs = Mission.objects.filter(status__in=TERMINAL_STATUSES)
    if scope.mission_ids is not None:
        qs = qs.filter(pk__in=scope.mission_ids, purged_at__isnull=True)
    else:
        leftovers = (
            Exists(Checkpoint.objects.filter(mission=OuterRef("pk")))
            | Exists(OperationEvent.objects.filter(operation__mission=OuterRef("pk")))
            | Exists(Constraint.objects.filter(mission=OuterRef("pk")))
        )
        qs = qs.filter(Q(purged_at__isnull=True, expires_at__lte=scope.as_of) | Q(Q(purged_at__isnull=False) & leftovers))
    return qs.exclude(pk__in=_held_mission_ids()).exclude(owner_id__in=_held_user_ids())


def _purge_mission_batch(scope: PurgeScope) -> Counter:
    # Locked rows are skipped: two purges running at once never work on the same mission.
    ids = list(
        purgeable_missions(scope).order_by("expires_at", "pk").select_for_update(skip_locked=True).values_list("pk", flat=True)[: scope.batch_size]
    )
    if not ids:
        return Counter()
    return purge_missions(ids, actor=scope.actor)


def purge_missions(ids: list[int], *, actor: Actor) -> Counter:
    """Delete the working state of these (locked) missions and leave each as a tombstone. The
    caller's transaction makes it all or nothing: a tombstone is never left pointing at state
    that is half gone, and state is never left without its tombstone."""
    counts: Counter = Counter(missions=len(ids))
    blob_refs = _blob_refs_of(ids)
    now = timezone.now()
    missions = list(Mission.objects.filter(pk__in=ids).values_list("pk", "status"))
    Mission.objects.filter(pk__in=ids).update(
        head_checkpoint=None, last_verified_checkpoint=None, objective="", stop_detail="", retry_at=None, updated_at=now,
    )
    # A mission purged before keeps the date it was first purged.
    Mission.objects.filter(pk__in=ids, purged_at__isnull=True).update(purged_at=now)
    counts["milestones_scrubbed"] = Milestone.objects.filter(mission_id__in=ids).update(checkpoint=None, summary="", evidence=[], note="")
    Run.objects.filter(mission_id__in=ids).update(stop_detail="")
    counts["snapshot_requests"] = _delete(SnapshotRequest.objects.filter(mission_id__in=ids))
    counts["approvals"] = _delete(Approval.objects.filter(mission_id__in=ids))
    counts["memory_proposals"] = _delete(MemoryProposal.objects.filter(mission_id__in=ids))
    counts["constraints"] = _delete(Constraint.objects.filter(mission_id__in=ids))
    counts["checkpoints"] = _delete(Checkpoint.objects.filter(mission_id__in=ids))
    counts["records"] = _delete(Record.objects.filter(mission_id__in=ids))
    counts["operation_events"] = _delete(OperationEvent.objects.filter(operation__mission_id__in=ids))
    # The ledger stays (which side effects happened, with their external ids) without payloads.
    counts["operations_scrubbed"] = Operation.objects.filter(mission_id__in=ids).update(request={}, receipt=None, error="")
    scopes = Q()
    for pk in ids:
        scopes |= Q(scope__startswith=f"m{pk}:")
    counts["idempotency_keys"] = _delete(IdempotentRequest.objects.filter(scopes))
    _scrub_audit(ids)
    blobs, blob_bytes = release_blobs(blob_refs)
    counts["blobs"], counts["blob_bytes"] = blobs, blob_bytes
    by_id = {m.pk: m for m in Mission.objects.filter(pk__in=ids)}
    for pk, status in missions:
        audit(actor=actor, mission=by_id[pk], entity="mission", entity_id=pk, action="purge", from_state=status, to_state="purged")
    return +counts


def _delete(qs: QuerySet) -> int:
    # Only the keys are loaded: the ORM needs the rows to null the links into them (SET_NULL),
    # not their payloads (state references, raw blob bytes).
    model = qs.model
    return qs.only("pk").delete()[1].get(model._meta.label, 0)


def _scrub_audit(ids: list[int]) -> None:
    events = [
        event for event in AuditEvent.objects.filter(mission_id__in=ids).only("pk", "data")
        if any(key in (event.data or {}) for key in AUDIT_CONTENT_KEYS)
    ]
    for event in events:
        event.data = {k: v for k, v in event.data.items() if k not in AUDIT_CONTENT_KEYS}
    # bulk_update writes the rows directly: audit events are otherwise append-only (save refuses).
    AuditEvent.objects.bulk_update(events, ["data"], batch_size=500)


def _blob_refs_of(ids: list[int]) -> set[str]:
    refs: set[str] = set()
    for state_refs, agent_refs in Checkpoint.objects.filter(mission_id__in=ids).values_list("state_refs", "agent_state_refs"):
        refs.update((state_refs or {}).values())
        refs.update((agent_refs or {}).values())
    refs.update(Record.objects.filter(mission_id__in=ids, blob__isnull=False).values_list("blob_id", flat=True))
    return refs


def release_blobs(candidates: set[str]) -> tuple[int, int]:
    """Delete those of these blobs that nothing refers to any more (blobs are shared across
    missions by content). Returns (blobs deleted, bytes freed)."""
    if not candidates:
        return 0, 0
    sizes = dict(Blob.objects.filter(sha256__in=candidates).values_list("sha256", "size_bytes"))
    deleted = blobs_collect_garbage(candidates)
    if not deleted:
        return 0, 0
    kept = set(Blob.objects.filter(sha256__in=list(sizes)).values_list("sha256", flat=True))
    return deleted, sum(size for sha, size in sizes.items() if sha not in kept)


def _purge_memory_batch(scope: PurgeScope) -> Counter:
    if scope.mission_ids is not None:
        return Counter()
    ids = list(
        MemoryItem.objects.filter(expires_at__lte=scope.as_of)
        .exclude(owner_id__in=_held_user_ids())
        .order_by("expires_at", "pk")
        .select_for_update(skip_locked=True)
        .values_list("pk", flat=True)[: scope.batch_size]
    )
    if not ids:
        return Counter()
    for item in MemoryItem.objects.filter(pk__in=ids).only("pk", "owner_id"):
        audit(actor=scope.actor, mission=None, entity="memory_item", entity_id=item.pk, action="expire", from_state="kept", to_state="deleted")
    return Counter(memory_items=_delete(MemoryItem.objects.filter(pk__in=ids)))


def retention_delete_now(*, actor: Actor, mission_id: int) -> PurgeLog:
    """The owner deletes a finished quest's history now, through the same purge path and log."""
    require_person(actor)
    mission = get_for(actor, Mission, mission_id)
    if not mission.is_terminal:
        raise Conflict("Only a finished quest (completed or cancelled) can be deleted.", code="invalid_transition", status=mission.status)
    if mission.purged_at is not None:
        raise Conflict("This quest's history was already deleted.", code="invalid_transition")
    if is_held(mission):
        raise Conflict("This quest's history cannot be deleted right now; please contact support.", code="held")
    log = retention_purge(trigger="owner", actor=actor, mission_ids=[mission.pk])
    if not log.counts.get("missions"):
        raise Conflict("This quest's history could not be deleted right now; try again in a moment.", code="busy")
    return log


# ---------------------------------------------------------------------------------------------
# A person's own data


def account_export(*, actor: Actor) -> dict[str, Any]:
    """Everything Questlog holds about this person, and nothing of anyone else."""
    require_person(actor)
    user = actor.user
    missions = Mission.objects.filter(owner=user).order_by("created_at", "id")
    return {
        "format": "questlog-export/1",
        "exported_at": ser.iso(timezone.now()),
        "user": {
            "username": user.get_username(), "email": user.email, "first_name": user.first_name,
            "last_name": user.last_name, "date_joined": ser.iso(user.date_joined),
        },
        "missions": [_mission_export(mission) for mission in missions],
        "memory": {
            "items": [_lifecycle(item, ser.memory_item_dict(item)) for item in MemoryItem.objects.filter(owner=user).order_by("id")],
            "proposals": [_lifecycle(p, ser.memory_proposal_dict(p)) for p in MemoryProposal.objects.filter(owner=user).order_by("id")],
        },
        "agent_tokens": [
            {"id": t.pk, "name": t.name, "prefix": t.prefix, "mission_id": t.mission_id, "created_at": ser.iso(t.created_at),
             "last_used_at": ser.iso(t.last_used_at), "revoked_at": ser.iso(t.revoked_at)}
            for t in AgentToken.objects.filter(user=user).order_by("id")
        ],
    }


def _lifecycle(obj: Model, data: dict[str, Any]) -> dict[str, Any]:
    return {
        **data,
        "lifecycle": {
            "created_at": ser.iso(obj.created_at), "retention_class": obj.retention_class,
            "retention_approved_at": ser.iso(obj.retention_approved_at), "expires_at": ser.iso(obj.expires_at),
        },
    }


def _mission_export(mission: Mission) -> dict[str, Any]:
    records = list(Record.objects.filter(mission=mission).order_by("id"))
    raw = blobs_get([r.blob_id for r in records if r.blob_id])
    operations = list(Operation.objects.filter(mission=mission).prefetch_related("events").order_by("id"))
    return {
        **_lifecycle(mission, ser.mission_dict(mission)),
        "runs": [ser.run_dict(run) for run in mission.runs.order_by("number")],
        "constraints": [_lifecycle(c, ser.constraint_dict(c)) for c in mission.constraints.order_by("id")],
        "checkpoints": [_checkpoint_export(cp) for cp in Checkpoint.objects.filter(mission=mission).order_by("seq")],
        "records": [
            _lifecycle(r, {**ser.record_dict(r), "raw_text": raw[r.blob_id].decode(errors="replace") if r.blob_id in raw else None})
            for r in records
        ],
        "ledger": [
            _lifecycle(op, {
                **ser.operation_dict(op),
                "events": [
                    {"event": e.event, "external_status": e.external_status or None, "receipt": e.receipt, "error": e.error or None,
                     "created_at": ser.iso(e.created_at)}
                    for e in op.events.all()
                ],
            })
            for op in operations
        ],
        "approvals": [_lifecycle(a, ser.approval_dict(a)) for a in mission.approvals.order_by("id")],
        "milestones": [_lifecycle(m, ser.milestone_dict(m)) for m in mission.milestones.order_by("id")],
        "activity": [
            {"created_at": ser.iso(e.created_at), "actor": e.actor, "entity": e.entity, "entity_id": e.entity_id,
             "action": e.action, "from_state": e.from_state, "to_state": e.to_state}
            # Staff holds are not the person's data; they stay with staff.
            for e in AuditEvent.objects.filter(mission=mission).exclude(entity="hold").order_by("id")
        ],
    }


def _checkpoint_export(checkpoint: Checkpoint) -> dict[str, Any]:
    state, agent_state = checkpoint_documents(checkpoint)
    return _lifecycle(checkpoint, {**ser.checkpoint_dict(checkpoint), "state": state, "agent_state": agent_state})
