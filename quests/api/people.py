"""People-only endpoints: a session is required; agent tokens get 403 (services enforce it)."""

from django.http import HttpRequest
from ninja import Router

from quests.api.auth import actor
from quests.api.responses import ACT, BODY, answers
from quests.api.schemas import DecisionIn, MemoryDecisionIn, RestoreIn, ReviewIn
from quests.schemas import (
    ApprovalOut,
    ConstraintOut,
    ForgetOut,
    MemoryProposalOut,
    MilestoneOut,
    MissionOut,
    RestoreOut,
    StandingDecisionOut,
)
from quests.services import approvals, memory, milestones, missions, standing

router = Router(tags=["people"])
# Every route here acts on an object by id, whose current state may not allow the action.
DECIDE = (*ACT, *BODY, 404, 409)
ACT_ON = (*ACT, 404, 409)


@router.post("/approvals/{int:approval_id}/decision", response=answers(ApprovalOut, *DECIDE))
def decide_approval(request: HttpRequest, approval_id: int, body: DecisionIn):
    return approvals.approval_decide(
        actor=actor(request),
        approval_id=approval_id,
        decision=body.decision,
        payload=body.payload,
        note=body.note,
        always=body.always,
    )


@router.post("/milestones/{int:milestone_id}/review", response=answers(MilestoneOut, *DECIDE))
def review_milestone(request: HttpRequest, milestone_id: int, body: ReviewIn):
    return milestones.milestone_review(actor=actor(request), milestone_id=milestone_id, action=body.action, note=body.note)


@router.post("/missions/{int:mission_id}/pause", response=answers(MissionOut, *ACT_ON))
def pause(request: HttpRequest, mission_id: int):
    return missions.mission_pause(actor=actor(request), mission_id=mission_id)


@router.post("/missions/{int:mission_id}/unpause", response=answers(MissionOut, *ACT_ON))
def unpause(request: HttpRequest, mission_id: int):
    return missions.mission_unpause(actor=actor(request), mission_id=mission_id)


@router.post("/missions/{int:mission_id}/cancel", response=answers(MissionOut, *ACT_ON))
def cancel(request: HttpRequest, mission_id: int):
    return missions.mission_cancel(actor=actor(request), mission_id=mission_id)


@router.post("/missions/{int:mission_id}/restore", response=answers(RestoreOut, *DECIDE))
def restore(request: HttpRequest, mission_id: int, body: RestoreIn):
    mission, checkpoint = missions.mission_restore(actor=actor(request), mission_id=mission_id, checkpoint_id=body.checkpoint_id)
    mission.checkpoint = checkpoint  # type: ignore[attr-defined]  # RestoreOut reads it beside the mission's fields
    return mission


@router.post("/missions/{int:mission_id}/constraints/{int:constraint_id}/retire", response=answers(ConstraintOut, *ACT_ON))
def retire_constraint(request: HttpRequest, mission_id: int, constraint_id: int):
    return missions.constraint_retire(actor=actor(request), mission_id=mission_id, constraint_id=constraint_id)


@router.post("/missions/{int:mission_id}/standing-decisions/{int:standing_id}/revoke", response=answers(StandingDecisionOut, *ACT_ON))
def revoke_standing_decision(request: HttpRequest, mission_id: int, standing_id: int):
    return standing.standing_decision_revoke(actor=actor(request), mission_id=mission_id, standing_id=standing_id)


@router.post("/memory-proposals/{int:proposal_id}/decision", response=answers(MemoryProposalOut, *DECIDE))
def decide_memory(request: HttpRequest, proposal_id: int, body: MemoryDecisionIn):
    return memory.memory_decide(actor=actor(request), proposal_id=proposal_id, decision=body.decision)


@router.delete("/memory/{int:item_id}", response=answers(ForgetOut, *ACT, 404))
def forget_memory(request: HttpRequest, item_id: int):
    memory.memory_forget(actor=actor(request), item_id=item_id)
    return {"deleted": True, "id": item_id}
