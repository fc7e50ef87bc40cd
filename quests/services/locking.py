"""Row locks and fencing: the bottom of the service layer. It imports no other service but
access, audit (for the Actor type), errors and idempotency's lookup, so every service can use it without an import cycle."""

from typing import Any, cast

from django.db.models import ForeignKey, QuerySet
from django.utils import timezone

from quests.engine import writes
from quests.models import Mission, Run
from quests.services.audit import Actor
from quests.services.errors import NotFound, run_ended


def lock_mission(mission_id: int) -> Mission:
    # Every change to a mission's save state holds its row lock: writes to one mission are
    # serialised, so sequence numbers, fencing checks and idempotency lookups never race.
    return Mission.objects.select_for_update().get(pk=mission_id)


def named_now(mission: Mission, field: str, rows: QuerySet | None = None) -> Any:
    """The row the locked mission's `field` (a foreign key) names now. One read along with the lock
    (select_related) can be a moment old when another writer changed the field meanwhile: the
    locked row is re-read then, a joined one is not; so a stale join is read again (from `rows`
    when given: the related model's rows with what the caller reads along)."""
    pk = getattr(mission, f"{field}_id")
    if pk is None:
        return None
    descriptor = cast(ForeignKey, Mission._meta.get_field(field))
    cached = descriptor.get_cached_value(mission, default=None)
    if cached is not None and cached.pk == pk:
        return cached
    row = (rows if rows is not None else descriptor.related_model._default_manager).get(pk=pk)
    setattr(mission, field, row)
    return row


def caller(actor: Actor) -> writes.Caller:
    """Whose missions the engine's statements may touch (as `access.visible` says)."""
    token_mission_id = actor.token.mission_id if actor.token is not None else None
    return writes.Caller(user_id=actor.user.pk, token_mission_id=token_mission_id)


def run_locked_or_404(locked: writes.Locked | None, run_id: int) -> writes.Locked:
    """What a run's lock read (which took the blob writers' guard with it, and read the head's agent
    state); NotFound when the caller may not see the run."""
    if locked is None:
        raise NotFound(f"No run with id {run_id}.")
    locked.mission.blobs_guarded = True
    locked.mission.locked_by = locked
    return locked


def refuse_unless_active(run: Run, mission: Mission) -> None:
    """Fencing: a run that is no longer its mission's active run may not write (its id is its
    fencing token). The active one's heartbeat goes with its write."""
    if mission.active_run_id != run.pk:
        run.refresh_from_db(fields=["ended_at", "stop_reason"])
        raise run_ended(run.stop_reason)


def fence(run: Run, mission: Mission) -> None:
    """Refuse writes from a run that is no longer its mission's active run; refresh the
    heartbeat of the active one."""
    refuse_unless_active(run, mission)
    run.heartbeat_at = timezone.now()
    Run.objects.filter(pk=run.pk).update(heartbeat_at=run.heartbeat_at)
