"""The resume bundle: the contract for the next run. Its cost depends on what is live (active
constraints, unresolved records, the ledger), never on how long the history is.

It is one named read of the storage engine (`quests.engine.reads.resume_bundle`: one statement on
PostgreSQL): the mission with its two checkpoints and the head's agent state, constraints, live
records, the ledger, milestones, approvals, the active run, the owner's memory and the standing
decisions. Each section loads only the columns the bundle shows, already named and typed as the
answer shows them, and the answer is constructed straight from those rows: compiling the reads
through the ORM, and validating rows just read from the database again, cost more than the
database's own work."""

from types import SimpleNamespace
from typing import Any, cast

from django.db.models import Exists, Model, OuterRef, QuerySet, Subquery
from pydantic import BaseModel

from checkpoints.models import DURABLE_RECORD_KINDS, Operation, OperationStatus, Record, RecordKind
from quests.engine import reads
from quests.models import Approval, ApprovalStatus, Milestone, Mission, ReviewStatus, Run
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
)
from quests.services import machine
from quests.services.audit import Actor
from quests.services.errors import NotFound
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


def resume_summary(mission: Mission, pending: machine.Pending | None = None) -> dict[str, Any]:
    """What a person's mission page shows of the bundle: its next action, its sentence and its live
    records, by the bundle's own rules (the same Pending, `machine.next_action` and
    `machine.message`, the same live records), so the page says exactly what the next run is told.
    Two reads, whatever the size of the ledger, the milestones and the approvals the bundle
    carries whole. `mission` must be current (the page has just read it), and so must `pending` if
    given (read with it, as `pending_annotations`: then one read)."""
    if pending is None:
        pending = pending_of(Mission.objects.filter(pk=mission.pk).only("id").annotate(**pending_annotations()).get())
    live_records = list(_live_records(mission.pk))
    action = machine.next_action(mission, pending)
    return {"next_action": action, "message": machine.message(mission, action, pending), **_sections(live_records)}


def resume_bundle(mission: Mission, *, for_new_run: bool = False) -> dict[str, Any]:
    """The bundle as a plain dict. `mission` may be stale (any object with the mission's id): the
    mission row is read again, with the rest of the bundle."""
    return _bundle(mission.pk, user_id=None, token_mission_id=None, for_new_run=for_new_run).model_dump()


def bundle_schema(mission: Mission | int, *, actor: Actor | None = None, for_new_run: bool = False) -> ResumeBundleOut:
    """The bundle as its schema: the API returns it as is, without a second validation.

    Either a mission row the caller holds (read, locked or just changed in this transaction: the
    bundle reads the row again with the rest), or a mission id and the actor asking, who must be
    able to see the mission (else NotFound, like every other object out of reach)."""
    if isinstance(mission, Mission):
        return _bundle(mission.pk, user_id=None, token_mission_id=None, for_new_run=for_new_run)
    if actor is None:
        raise TypeError("bundle_schema(mission_id) needs the actor asking for it.")
    if actor.user is None:
        raise NotFound(f"No mission with id {mission}.")
    token_mission_id = actor.token.mission_id if actor.token is not None else None
    return _bundle(mission, user_id=actor.user.pk, token_mission_id=token_mission_id, for_new_run=for_new_run)


def _bundle(mission_id: int, *, user_id: int | None, token_mission_id: int | None, for_new_run: bool) -> ResumeBundleOut:
    """The bundle from the engine's one read (`quests.engine.reads.resume_bundle`): its rows are
    already the answer's fields, so each part is constructed from them without validation."""
    rows = reads.resume_bundle(mission_id, user_id=user_id, token_mission_id=token_mission_id)
    if rows is None:
        raise NotFound(f"No mission with id {mission_id}.")
    operations: dict[str, Any] = {group: [] for group in OPERATION_GROUPS.values()}
    for op in rows["ledger"]:
        operations[OPERATION_GROUPS[op["status"]]].append(OperationOut.model_construct(**op))
    records: dict[str, Any] = {section: [] for section in DURABLE_SECTIONS.values()}
    for record in rows["records"]:
        records[DURABLE_SECTIONS[record["kind"]]].append(RecordOut.model_construct(**record))
    pending = machine.Pending(
        approval_action=next((a["action"] for a in rows["approvals"] if a["status"] == ApprovalStatus.PENDING), None),
        milestone_title=next(
            (m["title"] for m in rows["milestones"] if m["gate"] and m["review_status"] == ReviewStatus.PENDING_REVIEW and not m["withdrawn"]), None
        ),
        any_attempted=bool(operations["to_reconcile"]),
        run_number=rows["active_runs"][0]["number"] if rows["active_runs"] else None,
    )
    # The state machine reads the mission's status, stop and run count: the row's values are enough.
    mission = cast(Mission, SimpleNamespace(**rows["mission"]))
    action = machine.next_action(mission, pending, for_new_run=for_new_run)
    head, verified = rows["checkpoint"], rows["last_verified_checkpoint"]
    return ResumeBundleOut.model_construct(
        mission=MissionSummaryOut.model_construct(**rows["mission"]),
        next_action=action,
        message=machine.message(mission, action, pending),
        checkpoint=BundleCheckpointOut.model_construct(**head, agent_state=rows["agent_state"]) if head is not None else None,
        last_verified_checkpoint=CheckpointRefOut.model_construct(**verified) if verified is not None else None,
        constraints=[ConstraintSummaryOut.model_construct(**row) for row in rows["constraints"]],
        **records,
        milestones=[MilestoneSummaryOut.model_construct(**row) for row in rows["milestones"]],
        approvals=[ApprovalSummaryOut.model_construct(**row) for row in rows["approvals"]],
        operations=OperationGroupsOut.model_construct(**operations),
        memory=[MemoryEntryOut.model_construct(**row) for row in rows["memory"]],
        standing_decisions=[StandingDecisionOut.model_construct(**row) for row in rows["standing_decisions"]],
    )


def _live_records(mission_id: int) -> QuerySet[Record]:
    """The mission's live durable records (open questions, blockers, dependencies, decisions)."""
    return _shown(Record.objects.live().filter(mission_id=mission_id, kind__in=DURABLE_RECORD_KINDS).order_by("id"), RecordOut, "blob")


def _sections(live_records: list[Record]) -> dict[str, Any]:
    """The live records by the bundle's section (lists of RecordOut), for the mission page."""
    records: dict[str, list[RecordOut]] = {section: [] for section in DURABLE_SECTIONS.values()}
    for record in live_records:
        records[DURABLE_SECTIONS[RecordKind(record.kind)]].append(construct(RecordOut, record))
    return records


def _shown[M: Model](queryset: QuerySet[M], schema: type[BaseModel], *extra: str) -> QuerySet[M]:
    """Only the columns `schema` shows (plus `extra`, which its resolvers or the bundle read)."""
    by_attname = {f.attname: f.name for f in queryset.model._meta.concrete_fields}
    shown = [by_attname[name] for name in schema.model_fields if name in by_attname]
    return queryset.only(*shown, *extra)
