"""Runs, heartbeats and fencing. A run's id is its fencing token: once a run has ended, its
run-scoped writes are refused, so a zombie agent cannot corrupt the mission a new run resumes."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from checkpoints import sections
from notifications.events import notify_run_stalled
from quests.engine import lifecycle, writes
from quests.models import Mission, MissionStatus, Run, StopReason
from quests.services import idempotency, machine, pending, savestate, tokens
from quests.services.audit import SYSTEM, Actor, audit_event
from quests.services.checkpointing import take_checkpoint
from quests.services.errors import Conflict, NotFound, mission_not_startable, run_ended
from quests.services.locking import caller, lock_mission, refuse_unless_active


@idempotency.retried_on_key_race
def run_start(*, actor: Actor, mission_id: int, agent: str = "", key: str | None = None) -> tuple[Run, bool]:
    """Start a run: lock, replay on key, end a stale active run, write, answer. Returns (run,
    replayed). The start itself is one statement (`writes.run_start`)."""
    keyed = idempotency.keyed("runs", key, {"agent": agent})
    with transaction.atomic():
        found = writes.lock_mission(caller(actor), mission_id, keyed) if actor.user is not None else None
        if found is None:
            raise NotFound(f"No mission with id {mission_id}.")
        mission, replay = found
        replayed = idempotency.replayed(keyed, replay)
        if replayed is not None:
            return Run.objects.get(pk=replayed), True
        if mission.active_run_id is not None:
            active = Run.objects.get(pk=mission.active_run_id)
            if not active.is_stale():
                raise Conflict(
                    "Another run is active on this mission; only one run may work on a mission at a time.",
                    code="run_active",
                    run_id=active.pk,
                )
            _interrupt(mission, active, detail="The run stopped sending heartbeats; a new run took over.")
        # Checked under the mission's lock: a decision undone meanwhile (approvals.approval_undo
        # holds the same lock) has put the mission back to waiting for approval, refused here.
        if mission.status in machine.NOT_STARTABLE:
            raise mission_not_startable(mission.status)
        mission.run_count += 1
        now = timezone.now()
        run = Run(mission=mission, number=mission.run_count, agent=agent, token=actor.token, started_at=now, heartbeat_at=now)
        events = [
            machine.transition(mission, event="start_run", to=MissionStatus.RUNNING, actor=actor, save=False),
            audit_event(actor=actor, mission=mission, entity="run", entity_id=None, action="start", to_state="active"),
        ]
        mission.updated_at = now
        run.pk = writes.run_start(run, mission, events, keyed)
        run._state.adding = False
        mission.active_run = run
        return run, False


def run_heartbeat(*, actor: Actor | writes.Credentials, run_id: int) -> Run:
    """One statement (`writes.heartbeat`), which also authenticates an agent token's `Credentials`
    (`tokens.run_beaten_for`): a compare-and-set on the run row alone, and the run read back. A
    heartbeat never needs the mission's lock, and it can never revive a run that a pause or a
    sweep has just ended."""
    run, beaten = tokens.run_beaten_for(actor, run_id)
    if run is None:
        raise NotFound(f"No run with id {run_id}.")
    if not beaten:
        raise run_ended(run.stop_reason)
    return run


def run_end(
    mission: Mission,
    run: Run,
    *,
    event: str,
    to: str,
    stop_reason: str,
    actor: Actor,
    detail: str = "",
    retry_at: datetime | None = None,
    checkpoint: bool = True,
) -> None:
    """End an active run and move its (locked) mission: both moves checked by the state machine
    and written, with their audit events, in one statement (`lifecycle.run_end`). Every end of a
    run writes a `stop` checkpoint unless the act that ended it writes its own (`checkpoint=False`)."""
    run.stop_detail = detail
    now = timezone.now()
    events = [
        machine.transition(mission, event=event, to=to, actor=actor, stop_reason=stop_reason, detail=detail, retry_at=retry_at, save=False),
        machine.moved(run, event="end", to=stop_reason, actor=actor, mission=mission),
    ]
    mission.updated_at = now
    lifecycle.run_end(run, mission, [e for e in events if e is not None], now=now)
    if mission.active_run_id == run.pk:
        mission.active_run = None
    if to in (MissionStatus.COMPLETED, MissionStatus.CANCELLED):
        pending_ended(mission, actor=actor)
    if checkpoint:
        take_checkpoint(mission, trigger="stop", run=run)


def pending_ended(mission: Mission, *, actor: Actor) -> None:
    """A mission that ends ends what is pending on it (`pending.pending_end`); the sections that
    touches are refreshed in its current document, which its stop checkpoint then copies."""
    if pending.pending_end(mission, actor=actor, because=pending.ENDED) and not savestate.ensure_current(mission):
        savestate.sections_refresh(mission, sections.touched("pending.ended"))


def _interrupt(mission: Mission, run: Run, *, detail: str) -> None:
    """End a run whose agent fell silent (its mission locked): the system interrupts it."""
    run_end(mission, run, event="interrupt", to=MissionStatus.READY, stop_reason=StopReason.INTERRUPTED, detail=detail, actor=SYSTEM)


def run_stop(*, actor: Actor | writes.Credentials, run_id: int, reason: str, detail: str = "", retry_at: datetime | None = None) -> Run:
    """The agent stops its run: authenticate and lock (an agent token's `Credentials` are checked
    by the lock's own statement: `tokens.run_locked_for`), fence, end the run and move its mission."""
    with transaction.atomic():
        actor, locked = tokens.run_locked_for(actor, run_id)
        run, mission = locked.run, locked.mission
        refuse_unless_active(run, mission)
        event, to = machine.STOP_EVENTS[reason]
        run_end(mission, run, event=event, to=to, stop_reason=reason, detail=detail, retry_at=retry_at, actor=actor)
        return run


def stalled_runs(now: datetime | None = None):
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT)
    return Run.objects.filter(ended_at__isnull=True, heartbeat_at__lt=cutoff)


def sweep_stalled_runs(now: datetime | None = None) -> int:
    """End every stale run `interrupted`. Safe to run concurrently: each run is re-checked under
    its mission's lock, so two sweeps never end the same run twice."""
    ended = 0
    for run_id, mission_id in stalled_runs(now).values_list("pk", "mission_id"):
        with transaction.atomic():
            mission = lock_mission(mission_id)
            run = Run.objects.get(pk=run_id)
            if run.ended_at is not None or not run.is_stale(now):
                continue
            _interrupt(mission, run, detail="The run stopped sending heartbeats.")
            notify_run_stalled(mission, run)
            ended += 1
    return ended
