"""The resume bundle: the contract for the next run. Its cost depends on what is live (active
constraints, unresolved records, the ledger), never on how long the history is.

It is read in two round trips to the database: everything the bundle shows (the mission with its
two checkpoints, constraints, live records, the ledger, milestones, approvals, the active run and
the owner's memory) in one, since none of those reads needs another's result; then the head
checkpoint's agent state, which needs the head's refs. Each read loads only the columns the
bundle shows, and the answer is built straight from those rows: validating rows just read from
the database again (pydantic through django-ninja's attribute getter) cost more than the reads."""

from typing import Any, cast

from django.db.models import Exists, ForeignKey, Model, OuterRef, QuerySet, Subquery
from pydantic import BaseModel

from checkpoints.models import DURABLE_RECORD_KINDS, Checkpoint, Operation, OperationStatus, Record, RecordKind
from checkpoints.roundtrip import one_round_trip
from checkpoints.services import checkpoint_agent_state
from quests.models import Approval, ApprovalStatus, Constraint, Milestone, Mission, Run, StandingDecision
from quests.schemas import (
    ApprovalSummaryOut,
    BundleCheckpointOut,
    CheckpointRefOut,
    ConstraintSummaryOut,
    MemoryEntryOut,
    MilestoneSummaryOut,
    MissionSummaryOut,
    OperationGroupsOut,
    OperationOut,
    RecordOut,
    ResumeBundleOut,
    StandingDecisionOut,
    construct,
    construct_all,
)
from quests.services import machine
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.errors import NotFound
from quests.services.memory import memory_for
from quests.services.savestate import DURABLE_SECTIONS

OPERATION_GROUPS = {
    OperationStatus.COMPLETED: "completed",
    OperationStatus.ATTEMPTED: "to_reconcile",
    OperationStatus.PLANNED: "planned",
    OperationStatus.FAILED: "failed",
}


def pending_annotations() -> dict[str, Any]:
    """What `machine.Pending` holds, as annotations of a Mission queryset: a few index lookups per
    mission whatever the size of its approvals, milestones and ledger. The bundle reads the same
    from the rows it carries whole; a person's pages (the board's cards, the mission page's
    sentence) read these, and `pending_of` makes them a Pending."""
    return {
        "pending_approval_action": Subquery(Approval.objects.filter(mission=OuterRef("pk"), status=ApprovalStatus.PENDING).order_by("id").values("action")[:1]),
        "gate_awaiting_review": Subquery(Milestone.objects.gates_awaiting_review().filter(mission=OuterRef("pk")).order_by("id").values("title")[:1]),
        "any_attempted": Exists(Operation.objects.filter(mission=OuterRef("pk"), status=OperationStatus.ATTEMPTED)),
        "active_run_number": Subquery(Run.objects.filter(mission=OuterRef("pk"), ended_at__isnull=True).order_by("number").values("number")[:1]),
    }


def pending_of(mission: Any) -> machine.Pending:
    """The Pending of a mission read with `pending_annotations` (attributes the stubs cannot follow)."""
    return machine.Pending(
        approval_action=mission.pending_approval_action,
        milestone_title=mission.gate_awaiting_review,
        any_attempted=mission.any_attempted,
        run_number=mission.active_run_number,
    )


def resume_summary(mission: Mission) -> dict[str, Any]:
    """What a person's mission page shows of the bundle: its next action, its sentence and its live
    records, by the bundle's own rules (the same Pending, `machine.next_action` and
    `machine.message`, the same live records), so the page says exactly what the next run is told.
    Two reads in one round trip, whatever the size of the ledger, the milestones and the
    approvals the bundle carries whole. `mission` must be current (the page has just read it)."""
    pending_rows, live_records = one_round_trip(
        Mission.objects.filter(pk=mission.pk).only("id").annotate(**pending_annotations()),
        _live_records(mission.pk),
    )
    pending = pending_of(pending_rows[0])
    action = machine.next_action(mission, pending)
    return {"next_action": action, "message": machine.message(mission, action, pending), **_sections(live_records)}


def resume_bundle(mission: Mission, *, for_new_run: bool = False) -> dict[str, Any]:
    """The bundle as a plain dict. `mission` may be stale (any object with the mission's id): the
    mission row is read again, with the rest of the bundle."""
    source = Mission.objects.filter(pk=mission.pk)
    return _bundle(source, mission.pk, mission.owner_id, for_new_run=for_new_run).model_dump()


def bundle_schema(mission: Mission | int, *, actor: Actor | None = None, for_new_run: bool = False) -> ResumeBundleOut:
    """The bundle as its schema: the API returns it as is, without a second validation.

    Either a mission row that is current (the caller has just read or locked it; it is used as it
    is, with its head and last verified checkpoints if they were selected with it), or a mission
    id and the actor asking, who must be able to see the mission (else NotFound, like every other
    object out of reach)."""
    if isinstance(mission, Mission):
        return _bundle(mission, mission.pk, mission.owner_id, for_new_run=for_new_run)
    if actor is None:
        raise TypeError("bundle_schema(mission_id) needs the actor asking for it.")
    return _bundle(visible(actor, Mission).filter(pk=mission), mission, actor.user, for_new_run=for_new_run)


def _bundle(source: Mission | QuerySet[Mission], mission_id: int, owner: Any, *, for_new_run: bool) -> ResumeBundleOut:
    missing: list[str] = []
    reads: list[QuerySet[Any]]
    if isinstance(source, QuerySet):
        # The head's agent state is read: its base map comes along (checkpoints.refmaps).
        reads = [source.select_related("head_checkpoint__agent_map", "last_verified_checkpoint")]
    else:
        # A row the caller already holds: only the checkpoints it was not read with are fetched.
        missing = [
            relation
            for relation in ("head_checkpoint", "last_verified_checkpoint")
            if getattr(source, f"{relation}_id") is not None and not cast(ForeignKey, Mission._meta.get_field(relation)).is_cached(source)
        ]
        reads = [Checkpoint.objects.filter(pk=getattr(source, f"{relation}_id")).select_related("agent_map") for relation in missing]
    rows = one_round_trip(
        *reads,
        _shown(Constraint.objects.filter(mission_id=mission_id, retired_at__isnull=True).order_by("id"), ConstraintSummaryOut),
        _live_records(mission_id),
        _shown(Operation.objects.filter(mission_id=mission_id).order_by("id"), OperationOut),
        _shown(Milestone.objects.filter(mission_id=mission_id).order_by("id"), MilestoneSummaryOut, "withdrawn"),
        _shown(Approval.objects.filter(mission_id=mission_id).order_by("id"), ApprovalSummaryOut),
        Run.objects.filter(mission_id=mission_id, ended_at__isnull=True).order_by("number").values_list("number", flat=True)[:1],
        memory_for(owner).only("name", "value"),
        _shown(StandingDecision.objects.filter(mission_id=mission_id).order_by("id"), StandingDecisionOut),
    )
    constraints, live_records, ledger, milestones, approvals, active_run, memory, standing = rows[len(reads) :]
    if isinstance(source, QuerySet):
        if not rows[0]:
            raise NotFound(f"No mission with id {mission_id}.")
        mission = rows[0][0]
    else:
        mission = source
        for relation, found in zip(missing, rows):
            setattr(mission, relation, found[0] if found else None)

    operations: dict[str, Any] = {group: [] for group in OPERATION_GROUPS.values()}
    for op in ledger:
        operations[OPERATION_GROUPS[op.status]].append(construct(OperationOut, op))
    records = _sections(live_records)
    pending = machine.Pending(
        approval_action=next((a.action for a in approvals if a.status == "pending"), None),
        milestone_title=next((m.title for m in milestones if m.is_gate_awaiting_review), None),
        any_attempted=bool(operations["to_reconcile"]),
        run_number=active_run[0] if active_run else None,
    )
    action = machine.next_action(mission, pending, for_new_run=for_new_run)
    head = mission.head_checkpoint
    if head is not None:
        head.agent_state = checkpoint_agent_state(head)
    verified = mission.last_verified_checkpoint
    return ResumeBundleOut.model_construct(
        mission=construct(MissionSummaryOut, mission),
        next_action=action,
        message=machine.message(mission, action, pending),
        checkpoint=construct(BundleCheckpointOut, head) if head is not None else None,
        last_verified_checkpoint=construct(CheckpointRefOut, verified) if verified is not None else None,
        constraints=construct_all(ConstraintSummaryOut, constraints),
        **records,
        milestones=construct_all(MilestoneSummaryOut, milestones),
        approvals=construct_all(ApprovalSummaryOut, approvals),
        operations=OperationGroupsOut.model_construct(**operations),
        memory=construct_all(MemoryEntryOut, memory),
        standing_decisions=construct_all(StandingDecisionOut, standing),
    )


def _live_records(mission_id: int) -> QuerySet[Record]:
    """The mission's live durable records (open questions, blockers, dependencies, decisions)."""
    return _shown(Record.objects.live().filter(mission_id=mission_id, kind__in=DURABLE_RECORD_KINDS).order_by("id"), RecordOut, "blob")


def _sections(live_records: list[Record]) -> dict[str, Any]:
    """The live records by the bundle's section (lists of RecordOut)."""
    records: dict[str, list[RecordOut]] = {section: [] for section in DURABLE_SECTIONS.values()}
    for record in live_records:
        records[DURABLE_SECTIONS[RecordKind(record.kind)]].append(construct(RecordOut, record))
    return records


def _shown[M: Model](queryset: QuerySet[M], schema: type[BaseModel], *extra: str) -> QuerySet[M]:
    """Only the columns `schema` shows (plus `extra`, which its resolvers or the bundle read)."""
    by_attname = {f.attname: f.name for f in queryset.model._meta.concrete_fields}
    shown = [by_attname[name] for name in schema.model_fields if name in by_attname]
    return queryset.only(*shown, *extra)
