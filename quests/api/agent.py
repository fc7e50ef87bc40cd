"""Endpoints agents call (people may call them with a session too)."""

from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router, Schema, Status

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_documents
from quests.api.auth import actor, authenticated_by_service
from quests.api.responses import ACT, BODY, READ, answers, created_or_replayed
from quests.api.schemas import (
    ApprovalBatchIn,
    ApprovalIn,
    CheckpointIn,
    CompleteIn,
    ConstraintIn,
    FailIn,
    MemoryProposalIn,
    MilestoneIn,
    MissionIn,
    ObserveIn,
    OperationIn,
    RecordIn,
    RunIn,
    StopIn,
)
from quests.models import Mission
from quests.schemas import (
    ApprovalList,
    ApprovalOut,
    CheckpointDetailOut,
    CheckpointList,
    CheckpointOut,
    ConstraintOut,
    MemoryItemList,
    MemoryProposalOut,
    MilestoneOut,
    MissionList,
    MissionOut,
    OperationOut,
    RecordOut,
    ResumeBundleOut,
    RunOut,
    RunStartOut,
)
from quests.services import approvals, memory, milestones, missions, operations, records, runs
from quests.services.access import get_for, visible
from quests.services.bundle import bundle_schema
from quests.services.errors import PayloadTooLarge

router = Router(tags=["agent"])
# A new object: the body can be refused, its mission or run may not exist, and a reused
# idempotency key (or an ended run) conflicts.
CREATE = (*ACT, *BODY, 404, 409)


def created(obj, replayed: bool) -> Status:
    return Status(200 if replayed else 201, obj)


@router.post("/missions", response=answers(created_or_replayed(MissionOut), *ACT, *BODY, 409))
def create_mission(request: HttpRequest, body: MissionIn):
    mission, replayed = missions.mission_create(
        actor=actor(request),
        title=body.title,
        objective=body.objective,
        constraints=body.constraints,
        planned_milestones=[m.dict() for m in body.planned_milestones or []],
        key=body.key,
    )
    return created(mission, replayed)


@router.get("/missions", response=answers(MissionList, *READ))
def list_missions(request: HttpRequest):
    return {"items": visible(actor(request), Mission).with_progress().order_by("-created_at", "-id")}


@router.get("/missions/{int:mission_id}", response=answers(MissionOut, *READ, 404))
def get_mission(request: HttpRequest, mission_id: int):
    return get_for(actor(request), Mission, mission_id)


@router.post("/missions/{int:mission_id}/constraints", response=answers(created_or_replayed(ConstraintOut), *CREATE))
def add_constraint(request: HttpRequest, mission_id: int, body: ConstraintIn):
    constraint, replayed = missions.constraint_add(actor=actor(request), mission_id=mission_id, text=body.text, key=body.key)
    return created(constraint, replayed)


@router.post("/missions/{int:mission_id}/runs", response=answers(created_or_replayed(RunStartOut), *CREATE))
def start_run(request: HttpRequest, mission_id: int, body: RunIn | None = None):
    body = body or RunIn()
    caller = actor(request)
    run, replayed = runs.run_start(actor=caller, mission_id=mission_id, agent=body.agent or "", key=body.key)
    # A new run's mission is the row the start locked and changed (fresh); a replay's is read again.
    resume = bundle_schema(run.mission if not replayed else run.mission_id, actor=caller, for_new_run=run.is_active)
    # Both parts are validated already; validating them again would re-read their own fields.
    answer = RunStartOut.model_construct(run=RunOut.from_orm(run), resume=resume)
    return created(answer, replayed)


@router.get("/missions/{int:mission_id}/resume", response=answers(ResumeBundleOut, *READ, 404))
def get_resume(request: HttpRequest, mission_id: int):
    # The access check is part of the bundle's own round trip to the database.
    return bundle_schema(mission_id, actor=actor(request))


class CheckpointPage(Schema):
    limit: int = 50
    before_seq: int | None = None


@router.get("/missions/{int:mission_id}/checkpoints", response=answers(CheckpointList, *READ, 404, 422))
def list_checkpoints(request: HttpRequest, mission_id: int, page: Query[CheckpointPage]):
    mission = get_for(actor(request), Mission, mission_id)
    limit = max(1, min(page.limit, 500))
    qs = Checkpoint.objects.filter(mission=mission).order_by("-seq")
    if page.before_seq is not None:
        qs = qs.filter(seq__lt=page.before_seq)
    return {"items": qs[:limit]}


@router.get("/checkpoints/{int:checkpoint_id}", response=answers(CheckpointDetailOut, *READ, 404))
def get_checkpoint(request: HttpRequest, checkpoint_id: int):
    checkpoint = get_for(actor(request), Checkpoint, checkpoint_id)
    # CheckpointDetailOut reads both documents as attributes of the row.
    checkpoint.state, checkpoint.agent_state = checkpoint_documents(checkpoint)  # type: ignore[attr-defined]
    return checkpoint


@router.post("/runs/{int:run_id}/heartbeat", response=answers(RunOut, *ACT, 404, 409))
def heartbeat(request: HttpRequest, run_id: int):
    return runs.run_heartbeat(actor=authenticated_by_service(request), run_id=run_id)


@router.post("/runs/{int:run_id}/checkpoints", response=answers(created_or_replayed(CheckpointOut), *CREATE))
def create_checkpoint(request: HttpRequest, run_id: int, body: CheckpointIn):
    checkpoint, replayed = records.checkpoint_create(
        actor=authenticated_by_service(request), run_id=run_id, agent_state=body.agent_state, note=body.note or "", key=body.key
    )
    return created(checkpoint, replayed)


@router.post("/runs/{int:run_id}/records", response=answers(created_or_replayed(RecordOut), *CREATE))
def create_record(request: HttpRequest, run_id: int, body: RecordIn):
    # Only raw tool output may use the larger body limit (the middleware let it through).
    if body.kind != "tool_output" and len(request.body) > settings.QUESTLOG_MAX_BODY_BYTES:
        raise PayloadTooLarge(settings.QUESTLOG_MAX_BODY_BYTES)
    record, replayed = records.record_create(
        actor=authenticated_by_service(request), run_id=run_id, kind=body.kind, text=body.text, data=body.data, resolves=body.resolves, key=body.key
    )
    return created(record, replayed)


@router.post("/runs/{int:run_id}/operations", response=answers(created_or_replayed(OperationOut), *CREATE))
def plan_operation(request: HttpRequest, run_id: int, body: OperationIn):
    op, replayed = operations.operation_plan(
        actor=authenticated_by_service(request),
        run_id=run_id,
        key=body.key,
        kind=body.kind,
        target=body.target,
        request=body.request,
        max_attempts=body.max_attempts,
    )
    return created(op, replayed)


@router.post("/operations/{int:operation_id}/attempt", response=answers(OperationOut, *ACT, 404, 409))
def attempt_operation(request: HttpRequest, operation_id: int):
    return operations.operation_attempt(actor=authenticated_by_service(request), operation_id=operation_id)


@router.post("/operations/{int:operation_id}/complete", response=answers(OperationOut, *ACT, *BODY, 404, 409))
def complete_operation(request: HttpRequest, operation_id: int, body: CompleteIn):
    return operations.operation_complete(
        actor=authenticated_by_service(request),
        operation_id=operation_id,
        external_id=body.external_id,
        external_status=body.external_status,
        receipt=body.receipt,
    )


@router.post("/operations/{int:operation_id}/fail", response=answers(OperationOut, *ACT, *BODY, 404, 409))
def fail_operation(request: HttpRequest, operation_id: int, body: FailIn):
    return operations.operation_fail(actor=authenticated_by_service(request), operation_id=operation_id, error=body.error, retryable=body.retryable)


@router.post("/operations/{int:operation_id}/observe", response=answers(OperationOut, *ACT, *BODY, 404, 409))
def observe_operation(request: HttpRequest, operation_id: int, body: ObserveIn):
    return operations.operation_observe(
        actor=authenticated_by_service(request), operation_id=operation_id, external_status=body.external_status, receipt=body.receipt
    )


@router.post("/runs/{int:run_id}/approvals", response=answers(created_or_replayed(ApprovalOut), *CREATE))
def request_approval(request: HttpRequest, run_id: int, body: ApprovalIn):
    approval, replayed = approvals.approval_request(
        actor=authenticated_by_service(request),
        run_id=run_id,
        action=body.action,
        payload=body.payload,
        reason=body.reason,
        agent_state=body.agent_state,
        respond_by=body.expires_at,
        key=body.key,
        agent_ref=body.agent_ref,
    )
    return created(approval, replayed)


@router.post("/runs/{int:run_id}/approvals/batch", response=answers(created_or_replayed(ApprovalList), *CREATE))
def request_approvals(request: HttpRequest, run_id: int, body: ApprovalBatchIn):
    items = [
        {"action": item.action, "payload": item.payload, "reason": item.reason, "respond_by": item.expires_at, "agent_ref": item.agent_ref}
        for item in body.items
    ]
    approvals_made, replayed = approvals.approvals_request(
        actor=authenticated_by_service(request), run_id=run_id, items=items, agent_state=body.agent_state, key=body.key
    )
    return created({"items": approvals_made}, replayed)


@router.post("/runs/{int:run_id}/milestones", response=answers(created_or_replayed(MilestoneOut), *CREATE))
def claim_milestone(request: HttpRequest, run_id: int, body: MilestoneIn):
    milestone, replayed = milestones.milestone_claim(
        actor=authenticated_by_service(request),
        run_id=run_id,
        kind=body.kind,
        title=body.title,
        summary=body.summary,
        evidence=body.evidence,
        gate=body.gate,
        agent_state=body.agent_state,
        key=body.key,
    )
    return created(milestone, replayed)


@router.post("/runs/{int:run_id}/memory-proposals", response=answers(created_or_replayed(MemoryProposalOut), *CREATE))
def propose_memory(request: HttpRequest, run_id: int, body: MemoryProposalIn):
    proposal, replayed = memory.memory_propose(
        actor=authenticated_by_service(request), run_id=run_id, name=body.name, value=body.value, reason=body.reason, key=body.key
    )
    return created(proposal, replayed)


@router.post("/runs/{int:run_id}/stop", response=answers(RunOut, *ACT, *BODY, 404, 409))
def stop_run(request: HttpRequest, run_id: int, body: StopIn):
    return runs.run_stop(actor=authenticated_by_service(request), run_id=run_id, reason=body.reason, detail=body.detail, retry_at=body.retry_at)


@router.get("/memory", response=answers(MemoryItemList, *READ))
def list_memory(request: HttpRequest):
    return {"items": memory.memory_for(actor(request).user)}
