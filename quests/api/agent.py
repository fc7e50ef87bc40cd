"""Endpoints agents call (people may call them with a session too)."""

from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.http import HttpRequest
from ninja import Query, Router, Schema, Status

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_documents
from quests import serializers as ser
from quests.api.auth import actor
from quests.api.schemas import (
    ApprovalIn, CheckpointIn, CompleteIn, ConstraintIn, FailIn, MemoryProposalIn, MilestoneIn, MissionIn,
    ObserveIn, OperationIn, RecordIn, RunIn, StopIn,
)
from quests.models import Mission
from quests.services import approvals, memory, missions, operations, records, runs
from quests.services.access import get_for, visible
from quests.services.bundle import resume_bundle
from quests.services.errors import PayloadTooLarge

router = Router(tags=["agent"])
Answer = dict[str, Any]
CREATED = {200: Answer, 201: Answer}


def created(obj_dict: Answer, replayed: bool) -> Status:
    return Status(200 if replayed else 201, obj_dict)


def missions_with_progress(qs):
    """Missions annotated with their milestone counts, so a list costs a fixed number of queries."""
    return qs.annotate(
        approved_milestones=Count("milestones", filter=Q(milestones__review_status="approved")),
    ).prefetch_related("milestones")


def mission_answer(mission: Mission) -> Answer:
    kinds = [m.kind for m in mission.milestones.all()]
    approved = getattr(mission, "approved_milestones", None)
    if approved is None:
        approved = sum(1 for m in mission.milestones.all() if m.review_status == "approved")
    return ser.mission_dict(mission, ser.mission_progress(mission, approved, kinds))


@router.post("/missions", response=CREATED)
def create_mission(request: HttpRequest, body: MissionIn):
    mission, replayed = missions.mission_create(
        actor=actor(request), title=body.title, objective=body.objective, constraints=body.constraints,
        planned_milestones=[m.dict() for m in body.planned_milestones or []], key=body.key,
    )
    return created(mission_answer(mission), replayed)


@router.get("/missions", response=Answer)
def list_missions(request: HttpRequest):
    qs = missions_with_progress(visible(actor(request), Mission)).order_by("-created_at", "-id")
    return {"items": [mission_answer(m) for m in qs]}


@router.get("/missions/{int:mission_id}", response=Answer)
def get_mission(request: HttpRequest, mission_id: int):
    return mission_answer(get_for(actor(request), Mission, mission_id))


@router.post("/missions/{int:mission_id}/constraints", response=CREATED)
def add_constraint(request: HttpRequest, mission_id: int, body: ConstraintIn):
    constraint, replayed = missions.constraint_add(actor=actor(request), mission_id=mission_id, text=body.text, key=body.key)
    return created(ser.constraint_dict(constraint), replayed)


@router.post("/missions/{int:mission_id}/runs", response=CREATED)
def start_run(request: HttpRequest, mission_id: int, body: RunIn | None = None):
    body = body or RunIn()
    run, replayed = runs.run_start(actor=actor(request), mission_id=mission_id, agent=body.agent or "", key=body.key)
    return created({"run": ser.run_dict(run), "resume": resume_bundle(run.mission, for_new_run=run.is_active)}, replayed)


@router.get("/missions/{int:mission_id}/resume", response=Answer)
def get_resume(request: HttpRequest, mission_id: int):
    return resume_bundle(get_for(actor(request), Mission, mission_id))


class CheckpointPage(Schema):
    limit: int = 50
    before_seq: int | None = None


@router.get("/missions/{int:mission_id}/checkpoints", response=Answer)
def list_checkpoints(request: HttpRequest, mission_id: int, page: Query[CheckpointPage]):
    mission = get_for(actor(request), Mission, mission_id)
    limit = max(1, min(page.limit, 500))
    qs = Checkpoint.objects.filter(mission=mission).order_by("-seq")
    if page.before_seq is not None:
        qs = qs.filter(seq__lt=page.before_seq)
    return {"items": [ser.checkpoint_dict(cp) for cp in qs[:limit]]}


@router.get("/checkpoints/{int:checkpoint_id}", response=Answer)
def get_checkpoint(request: HttpRequest, checkpoint_id: int):
    checkpoint = get_for(actor(request), Checkpoint, checkpoint_id)
    state, agent_state = checkpoint_documents(checkpoint)
    return {**ser.checkpoint_dict(checkpoint), "agent_state": agent_state, "state": state}


@router.post("/runs/{int:run_id}/heartbeat", response=Answer)
def heartbeat(request: HttpRequest, run_id: int):
    return ser.run_dict(runs.run_heartbeat(actor=actor(request), run_id=run_id))


@router.post("/runs/{int:run_id}/checkpoints", response=CREATED)
def create_checkpoint(request: HttpRequest, run_id: int, body: CheckpointIn):
    checkpoint, replayed = records.checkpoint_create(
        actor=actor(request), run_id=run_id, agent_state=body.agent_state, note=body.note or "", key=body.key
    )
    return created(ser.checkpoint_dict(checkpoint), replayed)


@router.post("/runs/{int:run_id}/records", response=CREATED)
def create_record(request: HttpRequest, run_id: int, body: RecordIn):
    # Only raw tool output may use the larger body limit (the middleware let it through).
    if body.kind != "tool_output" and len(request.body) > settings.QUESTLOG_MAX_BODY_BYTES:
        raise PayloadTooLarge(settings.QUESTLOG_MAX_BODY_BYTES)
    record, replayed = records.record_create(
        actor=actor(request), run_id=run_id, kind=body.kind, text=body.text, data=body.data, resolves=body.resolves, key=body.key
    )
    return created(ser.record_dict(record), replayed)



@router.post("/runs/{int:run_id}/operations", response=CREATED)
def plan_operation(request: HttpRequest, run_id: int, body: OperationIn):
    op, replayed = operations.operation_plan(
        actor=actor(request), run_id=run_id, key=body.key, kind=body.kind, target=body.target,
        request=body.request, max_attempts=body.max_attempts,
    )
    return created(ser.operation_dict(op), replayed)


@router.post("/operations/{int:operation_id}/attempt", response=Answer)
def attempt_operation(request: HttpRequest, operation_id: int):
    return ser.operation_dict(operations.operation_attempt(actor=actor(request), operation_id=operation_id))


@router.post("/operations/{int:operation_id}/complete", response=Answer)
def complete_operation(request: HttpRequest, operation_id: int, body: CompleteIn):
    op = operations.operation_complete(
        actor=actor(request), operation_id=operation_id, external_id=body.external_id,
        external_status=body.external_status, receipt=body.receipt,
    )
    return ser.operation_dict(op)


@router.post("/operations/{int:operation_id}/fail", response=Answer)
def fail_operation(request: HttpRequest, operation_id: int, body: FailIn):
    op = operations.operation_fail(actor=actor(request), operation_id=operation_id, error=body.error, retryable=body.retryable)
    return ser.operation_dict(op)


@router.post("/operations/{int:operation_id}/observe", response=Answer)
def observe_operation(request: HttpRequest, operation_id: int, body: ObserveIn):
    op = operations.operation_observe(actor=actor(request), operation_id=operation_id, external_status=body.external_status, receipt=body.receipt)
    return ser.operation_dict(op)


@router.post("/runs/{int:run_id}/approvals", response=CREATED)
def request_approval(request: HttpRequest, run_id: int, body: ApprovalIn):
    approval, replayed = approvals.approval_request(
        actor=actor(request), run_id=run_id, action=body.action, payload=body.payload, reason=body.reason,
        agent_state=body.agent_state, respond_by=body.expires_at, key=body.key,
    )
    return created(ser.approval_dict(approval), replayed)


@router.post("/runs/{int:run_id}/milestones", response=CREATED)
def claim_milestone(request: HttpRequest, run_id: int, body: MilestoneIn):
    milestone, replayed = approvals.milestone_claim(
        actor=actor(request), run_id=run_id, kind=body.kind, title=body.title, summary=body.summary,
        evidence=body.evidence, gate=body.gate, agent_state=body.agent_state, key=body.key,
    )
    return created(ser.milestone_dict(milestone), replayed)


@router.post("/runs/{int:run_id}/memory-proposals", response=CREATED)
def propose_memory(request: HttpRequest, run_id: int, body: MemoryProposalIn):
    proposal, replayed = memory.memory_propose(
        actor=actor(request), run_id=run_id, name=body.name, value=body.value, reason=body.reason, key=body.key
    )
    return created(ser.memory_proposal_dict(proposal), replayed)


@router.post("/runs/{int:run_id}/stop", response=Answer)
def stop_run(request: HttpRequest, run_id: int, body: StopIn):
    run = runs.run_stop(actor=actor(request), run_id=run_id, reason=body.reason, detail=body.detail, retry_at=body.retry_at)
    return ser.run_dict(run)


@router.get("/memory", response=Answer)
def list_memory(request: HttpRequest):
    return {"items": [ser.memory_item_dict(item) for item in memory.memory_for(actor(request).user)]}
