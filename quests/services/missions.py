"""Missions, constraints and the people-only mission controls (pause, unpause, cancel, restore)."""

from functools import partial

from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from checkpoints.models import DURABLE_RECORD_KINDS, Checkpoint, Record
from checkpoints.services import checkpoint_agent_state, state_get
from quests import limits
from quests.engine import lifecycle
from quests.langgraph.services.branch import graph_branch
from quests.models import ApprovalStatus, AuditEvent, Constraint, ConstraintSource, MilestoneKind, Mission, MissionStatus, StopReason
from quests.services import idempotency, machine, pending, savestate
from quests.services.access import get_for, require_person, require_whole_account
from quests.services.audit import Actor, audit, audit_event
from quests.services.checkpointing import take_checkpoint
from quests.services.errors import Conflict, InvalidInput, NotFound, require_within
from quests.services.runs import pending_ended, run_end
from quests.services.snapshots import state_changed


@idempotency.retried_on_key_race
def mission_create(
    *,
    actor: Actor,
    title: str,
    objective: str,
    constraints: list[str] | None = None,
    planned_milestones: list[dict[str, str]] | None = None,
    key: str | None = None,
) -> tuple[Mission, bool]:
    """Create a mission with its constraints: replay on key, write, answer. The mission, its
    constraints, their audit events and the key are one statement (`lifecycle.mission_create`,
    which also looks the key up, and inserts the empty current document); with constraints, their
    save state and snapshot request are a second, whatever their number."""
    require_whole_account(actor)
    planned = [{"kind": m["kind"], "title": m["title"]} for m in planned_milestones or []]
    for m in planned:
        if m["kind"] not in MilestoneKind.values:
            raise InvalidInput(f"Unknown milestone kind “{m['kind']}”.", field="planned_milestones")
    texts = constraints or []
    body = {"title": title, "objective": objective, "constraints": texts, "planned_milestones": planned}
    # A mission create's key is the account's, in scope `missions`: there is no mission yet.
    keyed = idempotency.keyed("missions", key, body)
    with transaction.atomic():
        try:
            _require_constraint_texts(texts, ConstraintSource.USER)
        except InvalidInput:
            # A key used before with another body is refused as reused, as it always was.
            idempotency.replayed(keyed, lifecycle.mission_key_earlier(actor.user.pk, "missions", keyed.key))
            raise
        now = timezone.now()
        mission = Mission(owner=actor.user, title=title, objective=objective, planned_milestones=planned, created_at=now, updated_at=now)
        # Inserted with its current document, every section empty: without one, the mission's
        # first write would rebuild it from the tables (ensure_current), a dozen reads.
        savestate.new_mission_document(mission, [])
        created = lifecycle.mission_create(
            mission,
            constraint_texts=texts,
            constraint_source=ConstraintSource.USER,
            created=audit_event(actor=actor, mission=None, entity="mission", entity_id=None, action="create", to_state=mission.status),
            key_scope="missions",
            key=keyed.key,
            request_hash=keyed.request_hash,
        )
        replayed = idempotency.replayed(keyed, created.replay)
        if replayed is not None:
            return Mission.objects.get(pk=replayed), True
        mission.pk = created.mission_id
        mission._state.adding, mission._state.db = False, DEFAULT_DB_ALIAS
        if texts:
            rows = [{"id": pk, "text": text, "source": ConstraintSource.USER} for pk, text in zip(created.constraint_ids, texts)]
            savestate.new_mission_document(mission, rows)
            state_changed(mission, "constraint.added", applied=True)
        return mission, False


def _require_constraint_texts(texts: list[str], source: str) -> None:
    # Every constraint, a correction's too, keeps to one length, so any of them can be edited.
    for text in texts:
        require_within(text, limits.CONSTRAINT_TEXT, what="A constraint", field="note" if source == ConstraintSource.CORRECTION else "text")


def _constraint_create(mission: Mission, *, text: str, source: str, actor: Actor, replaces: Constraint | None = None) -> Constraint:
    return _constraints_create(mission, texts=[text], source=source, actor=actor, replaces=replaces)[0]


def _constraints_create(mission: Mission, *, texts: list[str], source: str, actor: Actor, replaces: Constraint | None = None) -> list[Constraint]:
    """Add constraints in a fixed number of statements whatever their number: one insert for the
    constraints, one for their audit events, and the save state refreshed once. (Refreshing it per
    constraint rewrote the whole document each time: 5,000 constraints took minutes.)"""
    _require_constraint_texts(texts, source)
    constraints = Constraint.objects.bulk_create([Constraint(mission=mission, text=text, source=source, replaces=replaces) for text in texts])
    AuditEvent.objects.bulk_create(
        [audit_event(actor=actor, mission=mission, entity="constraint", entity_id=c.pk, action="add", to_state="active", text=c.text) for c in constraints]
    )
    state_changed(mission, "constraint.added")
    return constraints


def constraint_add(*, actor: Actor, mission_id: int, text: str, key: str | None = None) -> tuple[Constraint, bool]:
    """Anyone acting for the owner may add a constraint; an agent's is marked as its source."""
    with transaction.atomic():
        mission = get_for(actor, Mission, mission_id, for_update=True)
        body = {"text": text}
        scope = f"m{mission.pk}:constraints"
        replayed = idempotency.replayed_id(owner=mission.owner, scope=scope, key=key, body=body)
        if replayed is not None:
            return Constraint.objects.get(pk=replayed), True
        source = ConstraintSource.USER if actor.is_person else ConstraintSource.AGENT
        constraint = _constraint_create(mission, text=text, source=source, actor=actor)
        idempotency.remember(owner=mission.owner, scope=scope, key=key, body=body, object_id=constraint.pk)
        return constraint, False


def constraint_from_correction(mission: Mission, *, note: str, actor: Actor) -> Constraint:
    return _constraint_create(mission, text=note, source=ConstraintSource.CORRECTION, actor=actor)


def _locked_constraint(actor: Actor, mission_id: int, constraint_id: int) -> tuple[Mission, Constraint]:
    require_person(actor)
    mission = get_for(actor, Mission, mission_id, for_update=True)
    constraint = Constraint.objects.filter(mission=mission, pk=constraint_id).first()
    if constraint is None:
        raise NotFound(f"No constraint with id {constraint_id} on this mission.")
    return mission, constraint


def constraint_retire(*, actor: Actor, mission_id: int, constraint_id: int) -> Constraint:
    """Only a person retires a constraint; it is kept (shown struck through), never deleted."""
    with transaction.atomic():
        mission, constraint = _locked_constraint(actor, mission_id, constraint_id)
        if constraint.retired_at is not None:
            raise Conflict("This constraint is already retired.", code="invalid_transition")
        constraint.retired_at = timezone.now()
        constraint.retired_by = actor.user
        constraint.save(update_fields=["retired_at", "retired_by"])
        audit(actor=actor, mission=mission, entity="constraint", entity_id=constraint.pk, action="retire", from_state="active", to_state="retired")
        state_changed(mission, "constraint.retired")
        return constraint


def constraint_edit(*, actor: Actor, mission_id: int, constraint_id: int, text: str) -> Constraint:
    """An edit retires the old wording and adds the new one, so the history stays readable."""
    with transaction.atomic():
        old = constraint_retire(actor=actor, mission_id=mission_id, constraint_id=constraint_id)
        mission = Mission.objects.get(pk=mission_id)
        return _constraint_create(mission, text=text, source=old.source, actor=actor, replaces=old)


def mission_pause(*, actor: Actor, mission_id: int) -> Mission:
    with transaction.atomic():
        require_person(actor)
        mission = get_for(actor, Mission, mission_id, for_update=True)
        _pause(mission, actor=actor)
        return mission


def _pause(mission: Mission, *, actor: Actor) -> None:
    if not machine.can(mission, "pause"):
        raise Conflict(f"A {mission.status.replace('_', ' ')} mission cannot be paused.", code="invalid_transition")
    _stop(mission, event="pause", to=MissionStatus.PAUSED, stop_reason=StopReason.PAUSED_BY_USER, actor=actor, detail="Paused by you.")
    state_changed(mission, "mission.status")


def _stop(mission: Mission, *, event: str, to: str, stop_reason: str, actor: Actor, detail: str) -> None:
    """A person's stop of a (locked) mission: through its active run's end when a run is going,
    else the mission's own move. Either way a mission that ends ends what is pending and gets a
    stop checkpoint."""
    active = mission.runs.filter(ended_at__isnull=True).first()
    if active is not None:
        run_end(mission, active, event=event, to=to, stop_reason=stop_reason, actor=actor, detail=detail)
        return
    machine.transition(mission, event=event, to=to, actor=actor, stop_reason=stop_reason, detail=detail)
    if to in (MissionStatus.COMPLETED, MissionStatus.CANCELLED):
        pending_ended(mission, actor=actor)
        take_checkpoint(mission, trigger="stop")


def has_pending(mission: Mission) -> bool:
    """Whether a person still has to act: a pending approval or an unreviewed gate milestone."""
    return mission.approvals.filter(status=ApprovalStatus.PENDING).exists() or mission.milestones.gates_awaiting_review().exists()


def mission_unpause(*, actor: Actor, mission_id: int) -> Mission:
    with transaction.atomic():
        require_person(actor)
        mission = get_for(actor, Mission, mission_id, for_update=True)
        to = MissionStatus.WAITING_FOR_APPROVAL if has_pending(mission) else MissionStatus.READY
        machine.transition(mission, event="unpause", to=to, actor=actor)
        state_changed(mission, "mission.status")
        return mission


def mission_cancel(*, actor: Actor, mission_id: int) -> Mission:
    with transaction.atomic():
        require_person(actor)
        mission = get_for(actor, Mission, mission_id, for_update=True)
        _stop(mission, event="cancel", to=MissionStatus.CANCELLED, stop_reason=StopReason.CANCELLED_BY_USER, actor=actor, detail="Cancelled by you.")
        state_changed(mission, "pending.ended")
        return mission


def mission_restore(*, actor: Actor, mission_id: int, checkpoint_id: int) -> tuple[Mission, Checkpoint]:
    """Roll the mission back to an earlier checkpoint by opening a new branch from it. Records of
    the abandoned branch are kept but set aside; constraints and the operation ledger are never
    rolled back, because the outside world was not."""
    with transaction.atomic():
        require_person(actor)
        mission = get_for(actor, Mission, mission_id, for_update=True)
        target = Checkpoint.objects.filter(mission=mission, pk=checkpoint_id).with_refs().first()
        if target is None:
            raise InvalidInput("That checkpoint does not belong to this mission.", field="checkpoint_id")
        if mission.runs.filter(ended_at__isnull=True).exists():
            raise Conflict("A run is active: pause the mission before restoring it.", code="invalid_transition")
        if not machine.can(mission, "restore"):
            raise Conflict(f"A {mission.status} mission cannot be restored.", code="invalid_transition")
        kept_ids = _record_ids_in(target)
        abandoned = Record.objects.filter(mission=mission, abandoned=False, pk__gt=target.record_watermark).exclude(pk__in=kept_ids)
        abandoned_ids = list(abandoned.values_list("pk", flat=True))
        Record.objects.filter(pk__in=abandoned_ids).update(abandoned=True)
        # A resolution made on the abandoned branch is undone with it.
        Record.objects.filter(resolved_by__in=abandoned_ids).update(resolved=False, resolved_by=None)
        Record.objects.filter(mission=mission, pk__in=kept_ids, abandoned=True).update(abandoned=False)
        # Every checkpoint holds all durable records still open at its time, so it says which were
        # resolved then: a resolution undone by an earlier restore is redone when its branch returns.
        durable = Record.objects.filter(mission=mission, kind__in=DURABLE_RECORD_KINDS, abandoned=False, pk__lte=target.record_watermark)
        durable.filter(pk__in=kept_ids, resolved=True).update(resolved=False, resolved_by=None)
        durable.exclude(pk__in=kept_ids).filter(resolved=False).update(resolved=True)
        pending.pending_end(mission, actor=actor, because=pending.RESTORED)
        machine.transition(mission, event="restore", to=MissionStatus.READY, actor=actor)
        mission.head_checkpoint = target
        restore_point = partial(take_checkpoint, mission, trigger="restore", agent_state=checkpoint_agent_state(target), note=f"Restored from #{target.seq}")
        # A LangGraph thread's namespaces each go back too (a subgraph's on a restore checkpoint of its own).
        checkpoint = graph_branch(target, restore_point)
        audit(
            actor=actor,
            mission=mission,
            entity="checkpoint",
            entity_id=checkpoint.pk,
            action="restore",
            from_state=str(target.seq),
            to_state=str(checkpoint.seq),
            abandoned_records=len(abandoned_ids),
        )
        state_changed(mission, "restore")
        return mission, checkpoint


def _record_ids_in(checkpoint: Checkpoint) -> set[int]:
    state = state_get(checkpoint.state_refs)
    ids: set[int] = set()
    for section, items in state.items():
        if isinstance(items, list) and section not in ("constraints", "milestones", "approvals", "operations"):
            ids.update(item["id"] for item in items if isinstance(item, dict) and "id" in item)
    return ids


__all__ = [
    "mission_create",
    "constraint_add",
    "constraint_retire",
    "constraint_edit",
    "constraint_from_correction",
    "mission_pause",
    "mission_unpause",
    "mission_cancel",
    "mission_restore",
    "has_pending",
]
