"""People-only endpoints: a session is required; agent tokens get 403 (services enforce it)."""

from typing import Any

from django.http import HttpRequest
from ninja import Router

from quests import serializers as ser
from quests.api.agent import mission_answer
from quests.api.auth import actor
from quests.api.schemas import DecisionIn, MemoryDecisionIn, RestoreIn, ReviewIn
from quests.services import approvals, memory, missions

router = Router(tags=["people"])
Answer = dict[str, Any]


@router.post("/approvals/{int:approval_id}/decision", response=Answer)
def decide_approval(request: HttpRequest, approval_id: int, body: DecisionIn):
    approval = approvals.approval_decide(
        actor=actor(request), approval_id=approval_id, decision=body.decision, payload=body.payload, note=body.note
    )
    return ser.approval_dict(approval)


@router.post("/milestones/{int:milestone_id}/review", response=Answer)
def review_milestone(request: HttpRequest, milestone_id: int, body: ReviewIn):
    milestone = approvals.milestone_review(actor=actor(request), milestone_id=milestone_id, action=body.action, note=body.note)
    return ser.milestone_dict(milestone)


@router.post("/missions/{int:mission_id}/pause", response=Answer)
def pause(request: HttpRequest, mission_id: int):
    return mission_answer(missions.mission_pause(actor=actor(request), mission_id=mission_id))


@router.post("/missions/{int:mission_id}/unpause", response=Answer)
def unpause(request: HttpRequest, mission_id: int):
    return mission_answer(missions.mission_unpause(actor=actor(request), mission_id=mission_id))


@router.post("/missions/{int:mission_id}/cancel", response=Answer)
def cancel(request: HttpRequest, mission_id: int):
    return mission_answer(missions.mission_cancel(actor=actor(request), mission_id=mission_id))


@router.post("/missions/{int:mission_id}/restore", response=Answer)
def restore(request: HttpRequest, mission_id: int, body: RestoreIn):
    mission, checkpoint = missions.mission_restore(actor=actor(request), mission_id=mission_id, checkpoint_id=body.checkpoint_id)
    return {**mission_answer(mission), "checkpoint": ser.checkpoint_dict(checkpoint)}


@router.post("/missions/{int:mission_id}/constraints/{int:constraint_id}/retire", response=Answer)
def retire_constraint(request: HttpRequest, mission_id: int, constraint_id: int):
    return ser.constraint_dict(missions.constraint_retire(actor=actor(request), mission_id=mission_id, constraint_id=constraint_id))


@router.post("/memory-proposals/{int:proposal_id}/decision", response=Answer)
def decide_memory(request: HttpRequest, proposal_id: int, body: MemoryDecisionIn):
    return ser.memory_proposal_dict(memory.memory_decide(actor=actor(request), proposal_id=proposal_id, decision=body.decision))


@router.delete("/memory/{int:item_id}", response=Answer)
def forget_memory(request: HttpRequest, item_id: int):
    memory.memory_forget(actor=actor(request), item_id=item_id)
    return {"deleted": True, "id": item_id}
