"""The purge: deletes expired working state (and expired memory items) in batches, each batch
one transaction, and leaves each purged mission as a tombstone. Also the owner's "delete now",
which goes through the same path and log. Safe to run twice, or two at once: a second run finds
only what the first left, and locked rows are skipped."""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from checkpoints import sections
from checkpoints.models import Blob, Checkpoint, Operation, OperationEvent, PurgeLog, Record, RetentionPolicy, SnapshotRequest
from checkpoints.pruning import blobs_collect_garbage, blobs_referenced, chunks_named_by
from quests.langgraph.models import GraphWrite
from quests.models import (
    TERMINAL_STATUSES,
    Approval,
    AuditEvent,
    Constraint,
    IdempotentRequest,
    MemoryItem,
    MemoryProposal,
    Milestone,
    Mission,
    Run,
)
from quests.retention.services.holds import held_mission_ids, held_user_ids, is_held
from quests.retention.services.policy import POLICY_FIELDS
from quests.services.access import get_for, require_person
from quests.services.audit import SYSTEM, Actor, audit
from quests.services.errors import Conflict

# Audit data keys that carry what a person or agent wrote; a purge removes them with the rest of
# the working state and keeps who did what, when, and from which state to which.
AUDIT_CONTENT_KEYS = ("text", "detail", "note", "payload")


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
        as_of=as_of or timezone.now(),
        batch_size=max(policy.purge_batch_size, 1),
        actor=actor,
        mission_ids=tuple(mission_ids) if mission_ids is not None else None,
    )
    log = PurgeLog.objects.create(
        policy=policy,
        policy_snapshot={name: getattr(policy, name) for name in POLICY_FIELDS},
        as_of=scope.as_of,
        dry_run=dry_run,
        counts={},
        trigger=trigger,
        actor=actor.label,
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
    return qs.exclude(pk__in=held_mission_ids()).exclude(owner_id__in=held_user_ids())


def _purge_mission_batch(scope: PurgeScope) -> Counter:
    # Locked rows are skipped: two purges running at once never work on the same mission.
    ids = list(purgeable_missions(scope).order_by("expires_at", "pk").select_for_update(skip_locked=True).values_list("pk", flat=True)[: scope.batch_size])
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
    # The current save-state document goes too (its parts are released with the checkpoints').
    Mission.objects.filter(pk__in=ids).update(
        head_checkpoint=None,
        last_verified_checkpoint=None,
        objective="",
        stop_detail="",
        retry_at=None,
        updated_at=now,
        state_refs={},
        state_pending={},
        state_report={},
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
    # (LangGraph checkpoints go with their Questlog checkpoints; their pending writes name them by id.)
    counts["graph_writes"] = _delete(GraphWrite.objects.filter(mission_id__in=ids))
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
        event for event in AuditEvent.objects.filter(mission_id__in=ids).only("pk", "data") if any(key in (event.data or {}) for key in AUDIT_CONTENT_KEYS)
    ]
    for event in events:
        event.data = {k: v for k, v in event.data.items() if k not in AUDIT_CONTENT_KEYS}
    # bulk_update writes the rows directly: audit events are otherwise append-only (save refuses).
    AuditEvent.objects.bulk_update(events, ["data"], batch_size=500)


def _blob_refs_of(ids: list[int]) -> set[str]:
    refs: set[str] = set()
    groups: set[str] = set()
    for state_refs in Mission.objects.filter(pk__in=ids).values_list("state_refs", flat=True):
        refs.update((state_refs or {}).values())
        groups.update(sections.ledger_groups(state_refs or {}).values())
    refs.update(chunks_named_by(groups))
    refs.update(blobs_referenced(Checkpoint.objects.filter(mission_id__in=ids)))
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
        .exclude(owner_id__in=held_user_ids())
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
