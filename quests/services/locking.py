"""Row locks and fencing: the bottom of the service layer. It imports no other service (only
access and errors), so every service can use it without an import cycle."""

from typing import TYPE_CHECKING

from django.utils import timezone

from quests.models import Mission, Run
from quests.services.access import get_for
from quests.services.errors import run_ended

if TYPE_CHECKING:
    from quests.services.audit import Actor


def lock_mission(mission_id: int) -> Mission:
    # Every change to a mission's save state holds its row lock: writes to one mission are
    # serialised, so sequence numbers, fencing checks and idempotency lookups never race.
    return Mission.objects.select_for_update().get(pk=mission_id)


def lock_run(actor: "Actor", run_id: int) -> tuple[Run, Mission]:
    """The run (re-read under its mission's lock, so `ended_at` is current) and its mission."""
    run = get_for(actor, Run, run_id)
    mission = lock_mission(run.mission_id)
    run.refresh_from_db()
    return run, mission


def fence(run: Run) -> None:
    """Refuse writes from an ended run; refresh the heartbeat of an active one."""
    if run.ended_at is not None:
        raise run_ended(run.stop_reason)
    run.heartbeat_at = timezone.now()
    run.save(update_fields=["heartbeat_at"])
