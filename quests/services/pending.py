"""What is still pending when a mission ends or is restored: one rule, one function (API.md).

- Cancel or completion: pending approvals become `expired`; pending milestones keep
  `pending_review` but are withdrawn (they leave the inbox, and can still be reviewed).
- Restore: pending approvals and pending gate milestones become `expired`; the branch they
  belonged to has been set aside.

Every change goes through the state machine, so each one writes its audit event."""

from typing import Final, Literal

from django.utils import timezone

from quests.models import ApprovalStatus, Mission, ReviewStatus
from quests.services import machine
from quests.services.audit import Actor

ENDED: Final = "ended"
RESTORED: Final = "restored"


def pending_end(mission: Mission, *, actor: Actor, because: Literal["ended", "restored"]) -> int:
    """End what is pending on a mission whose row the caller holds locked. `because` is
    `pending.ENDED` (cancel or completion) or `pending.RESTORED`. Returns how many items it ended."""
    if because not in (ENDED, RESTORED):
        raise ValueError(f"Unknown reason to end pending items: {because}")
    now = timezone.now()
    ended = 0
    for approval in mission.approvals.filter(status=ApprovalStatus.PENDING).order_by("id"):
        approval.decided_at = now
        machine.move(approval, event="expire", to=ApprovalStatus.EXPIRED, actor=actor, mission=mission, fields=("decided_at",))
        ended += 1
    if because == ENDED:
        for milestone in mission.milestones.awaiting_review().order_by("id"):
            machine.move(milestone, event="withdraw", to=machine.MILESTONE_WITHDRAWN, actor=actor, mission=mission)
            ended += 1
    else:
        for milestone in mission.milestones.gates_awaiting_review().order_by("id"):
            machine.move(milestone, event="expire", to=ReviewStatus.EXPIRED, actor=actor, mission=mission)
            ended += 1
    return ended
