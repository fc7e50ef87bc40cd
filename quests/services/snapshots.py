"""Technical snapshots taken in the background, and the pruning of old ones.

The database row (`SnapshotRequest`) is the source of truth for work to do; the broker message is
only a wake-up call. So a broker that is down, a message that is lost or a worker killed halfway
delays a snapshot and never loses one, and a message delivered twice does no harm:

- every service that changes save state calls `state_changed`, which asks for a snapshot inside
  its own transaction (in the engine's `state_save` statement): at most one request per mission
  is pending, and its `not_before` keeps snapshots of one mission at least
  QUESTLOG_SNAPSHOT_INTERVAL apart; the message is published after commit and a failed publish
  is only logged;
- a worker claims the request with a compare-and-set update (`snapshot_take`), writes the
  snapshot under the mission's row lock only if the content differs from the head's, and marks
  the request done in the same transaction;
- the sweep (`snapshots_sweep`, on Celery beat) re-publishes requests that waited too long:
  never published, published but never run, or claimed by a worker that has gone silent.
"""

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from checkpoints import pruning, sections
from checkpoints.models import Checkpoint, RetentionPolicy, SnapshotRequest, Trigger
from quests.engine import checkpoints as engine_checkpoints, writes
from quests.models import Hold, Mission, Run
from quests.services import savestate
from quests.services.checkpointing import take_checkpoint_if_changed
from quests.services.locking import lock_mission
from quests.services.runs import stalled_runs

logger = logging.getLogger(__name__)

PENDING = SnapshotRequest.Status.PENDING
CLAIMED = SnapshotRequest.Status.CLAIMED
DONE = SnapshotRequest.Status.DONE
SWEEP_BATCH = 500
# Done requests are only read for debouncing and status; a day of them is plenty.
DONE_REQUESTS_KEPT = timedelta(days=1)
# Published by name: the services sit below the task modules and never import them.
SNAPSHOT_TASK = "quests.tasks.snapshot_take_task"


def _stale_after() -> timedelta:
    return timedelta(seconds=settings.QUESTLOG_SNAPSHOT_STALE_AFTER)


def state_changed(
    mission: Mission,
    change: str,
    *,
    applied: bool = False,
    key: writes.Key | None = None,
    made_id: int | None = None,
    resolves: int | None = None,
) -> None:
    """Called by every service that changes save state, in its transaction, holding the mission's
    lock, saying what changed (a kind of `checkpoints.sections.CHANGES`): saves the current
    document as `state_save_of` makes it, in one statement (`writes.state_save`), which also
    remembers the idempotency `key` that made `made_id` and tells the record a new record
    `resolves` who resolved it. (The operation ledger sends the same save in its own write.)"""
    save = state_save_of(mission, change, applied=applied, key=key, made_id=made_id, resolves=resolves)
    snapshot_asked(writes.state_save(save), save)


def state_save_of(
    mission: Mission,
    change: str,
    *,
    applied: bool = False,
    key: writes.Key | None = None,
    made_id: int | None = None,
    resolves: int | None = None,
) -> writes.StateSave:
    """The save after a change: refreshes the sections that kind of change touches (none when the
    service `applied` them itself, from the rows it read), bumps the mission's state version (live
    pages poll it), and says what to save: the current document (with the ledger chunks made
    meanwhile, `savestate.unstored_parts`) and a technical snapshot to ask for."""
    touched = sections.touched(change)  # (an undeclared kind of change is a KeyError, applied or not)
    if applied:
        touched = ()
    if not savestate.ensure_current(mission) and touched:
        savestate.sections_refresh(mission, touched)
    unstored = savestate.unstored_parts(mission)
    if unstored and not getattr(mission, "blobs_guarded", False):
        pruning.blob_writers_guard()
    mission.state_version += 1
    now = timezone.now()
    not_before = now
    # A new request is due QUESTLOG_SNAPSHOT_INTERVAL after the mission's previous claim, so
    # bursts of activity give at most one snapshot per interval, and the first change after a
    # quiet spell is taken at once; activity while a request is pending joins it.
    if mission.snapshot_claimed_at is not None:
        not_before = max(now, mission.snapshot_claimed_at + timedelta(seconds=settings.QUESTLOG_SNAPSHOT_INTERVAL))
    return writes.StateSave(
        mission_id=mission.pk,
        state_version=mission.state_version,
        state_refs=mission.state_refs,
        state_pending=mission.state_pending,
        state_report=mission.state_report,
        snapshot_not_before=not_before,
        key=key,
        key_owner_id=mission.owner_id,
        object_id=made_id,
        resolves=resolves,
        parts=unstored,
    )


def snapshot_asked(request_id: int | None, save: writes.StateSave) -> None:
    """After a save of the mission's state that asked for a snapshot (`request_id`; None when one
    was pending already): the message goes out after commit; if publishing fails the sweep
    publishes it later. What this process knew of the mission's row for its next agent checkpoint
    is forgotten: the save moved the row."""
    engine_checkpoints.known_moved(save.mission_id)
    if request_id is not None:
        transaction.on_commit(lambda: snapshot_enqueue(request_id, save.snapshot_not_before))


def snapshot_enqueue(request_id: int, not_before: datetime | None = None) -> bool:
    """Publish the wake-up message. Never raises: with the broker down the row stays pending
    and the sweep publishes it later, so no API call fails or waits because of the broker."""
    countdown = max(0.0, (not_before - timezone.now()).total_seconds()) if not_before else 0.0
    try:
        current_app.send_task(SNAPSHOT_TASK, args=(request_id,), countdown=countdown or None)
    except Exception:
        logger.warning("Snapshot request %s not published; the sweep will retry it.", request_id, exc_info=True)
        return False
    SnapshotRequest.objects.filter(pk=request_id).update(enqueued_at=timezone.now())
    return True


def snapshot_take(*, request_id: int) -> str:
    """Carry out one snapshot request; safe to run any number of times, concurrently or not.
    Returns what happened: `taken`, `unchanged`, or why nothing was done."""
    now = timezone.now()
    token = uuid.uuid4().hex
    # The claim is a compare-and-set: of two workers holding the same message, one wins. A claim
    # older than QUESTLOG_SNAPSHOT_STALE_AFTER belongs to a worker presumed dead and is taken over.
    claimable = Q(status=PENDING, not_before__lte=now) | Q(status=CLAIMED, claimed_at__lt=now - _stale_after())
    claimed = SnapshotRequest.objects.filter(claimable, pk=request_id).update(status=CLAIMED, claimed_at=now, claim_token=token, attempts=F("attempts") + 1)
    if not claimed:
        return _not_claimed(request_id)
    try:
        with transaction.atomic():
            # The mission's row lock, as every writer of its save state takes it; the head comes
            # along because the snapshot is compared with it.
            mission = (
                Mission.objects.select_for_update(of=("self",))
                .select_related("head_checkpoint__state_map", "head_checkpoint__agent_map")
                .get(snapshot_requests__pk=request_id)
            )
            checkpoint = take_checkpoint_if_changed(mission, trigger=Trigger.BACKGROUND)
            outcome = "taken" if checkpoint else "unchanged"
            # The compare-and-set that closes the claim: if a sweep handed the request to another
            # worker meanwhile (this one was presumed dead), the token differs and this one's
            # snapshot is rolled back, so the request is carried out once. The mission keeps the
            # claim's time: the next request's debounce counts from it.
            closed = SnapshotRequest.objects.filter(pk=request_id, status=CLAIMED, claim_token=token).update(
                status=DONE,
                completed_at=timezone.now(),
                checkpoint=checkpoint,
                outcome=outcome,
            )
            if not closed:
                raise _ClaimLost
            Mission.objects.filter(pk=mission.pk).update(snapshot_claimed_at=now)
    except _ClaimLost:
        return "claim_lost"
    except Mission.DoesNotExist:
        return "missing"  # the mission was deleted meanwhile, and its requests with it
    return outcome


class _ClaimLost(Exception):
    pass


def _not_claimed(request_id: int) -> str:
    request = SnapshotRequest.objects.filter(pk=request_id).values("status", "not_before").first()
    if request is None:
        return "missing"
    if request["status"] == PENDING and request["not_before"] > timezone.now():
        # Delivered early (a clock ahead of ours, or a re-publish): come back when it is due.
        snapshot_enqueue(request_id, request["not_before"])
        return "not_due"
    return "already_" + request["status"]


def snapshots_sweep(now: datetime | None = None) -> int:
    """Re-publish requests that waited too long. Publishing twice is harmless (the claim is a
    compare-and-set), so the sweep only has to be generous, never exact. Returns how many."""
    now = now or timezone.now()
    stale = now - _stale_after()
    due = (
        SnapshotRequest.objects.filter(
            Q(status=PENDING, not_before__lte=now, enqueued_at__isnull=True)
            | Q(status=PENDING, not_before__lt=stale, enqueued_at__lt=stale)
            | Q(status=CLAIMED, claimed_at__lt=stale)
        )
        .order_by("not_before")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    published = 0
    for request_id in list(due):
        if not snapshot_enqueue(request_id):
            break  # the broker is still down; the next sweep tries again
        published += 1
    return published


def snapshots_prune(now: datetime | None = None) -> dict[str, int]:
    """Prune old background snapshots under the staff retention policy, mission by mission under
    the mission's lock (so the head cannot move onto a checkpoint being removed), then collect
    the blobs nothing refers to any more. Missions under a staff hold are left alone."""
    now = now or timezone.now()
    policy = RetentionPolicy.current()
    cutoff = now - timedelta(days=policy.snapshot_prune_days)
    mission_ids = sorted(set(Checkpoint.objects.filter(trigger=Trigger.BACKGROUND, verified=False, created_at__lt=cutoff).values_list("mission_id", flat=True)))
    held = _held_mission_ids(mission_ids)
    totals = {"missions": 0, "checkpoints": 0, "blobs": 0, "held_missions": len(held)}
    candidates: set[str] = set()
    for mission_id in mission_ids:
        if mission_id in held:
            continue
        with transaction.atomic():
            mission = lock_mission(mission_id)
            result = pruning.checkpoints_prune(
                mission_id=mission_id,
                protected={pk for pk in (mission.head_checkpoint_id, mission.last_verified_checkpoint_id) if pk is not None},
                older_than=cutoff,
                keep_newest=policy.snapshot_keep_newest,
            )
        if result.pruned:
            totals["missions"] += 1
            totals["checkpoints"] += len(result.pruned)
            candidates |= result.blob_candidates
    if candidates:
        totals["blobs"] = pruning.blobs_collect_garbage(candidates)
    SnapshotRequest.objects.filter(status=DONE, completed_at__lt=now - DONE_REQUESTS_KEPT).delete()
    return totals


def _held_mission_ids(mission_ids: list[int]) -> set[int]:
    active = Hold.objects.filter(released_at__isnull=True)
    held = set(active.filter(mission_id__in=mission_ids).values_list("mission_id", flat=True))
    held_users = active.filter(user__isnull=False).values_list("user_id", flat=True)
    held |= set(Mission.objects.filter(pk__in=mission_ids, owner_id__in=held_users).values_list("pk", flat=True))
    return held


def snapshots_status(now: datetime | None = None) -> dict[str, Any]:
    """What `questlog_status` shows about background work, read from the database."""
    now = now or timezone.now()
    pending = SnapshotRequest.objects.filter(status=PENDING)
    oldest_due = pending.filter(not_before__lte=now).aggregate(m=Min("not_before"))["m"]
    claimed = SnapshotRequest.objects.filter(status=CLAIMED)
    return {
        "pending": pending.count(),
        "pending_due": pending.filter(not_before__lte=now).count(),
        "pending_unpublished": pending.filter(enqueued_at__isnull=True).count(),
        "oldest_due_age_seconds": (now - oldest_due).total_seconds() if oldest_due else None,
        "claimed": claimed.count(),
        "claimed_stale": claimed.filter(claimed_at__lt=now - _stale_after()).count(),
        "stalled_runs": stalled_runs(now).count(),
        "active_runs": Run.objects.filter(ended_at__isnull=True).count(),
    }
