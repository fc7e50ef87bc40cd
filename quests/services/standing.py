"""Standing decisions: a person answers once for every request of one action in one mission
("always approve send_email in this quest"), and may revoke that answer later.

A standing decision is made by deciding an approval with `always`; from then on the mission's
pending requests of that action, and every one asked later, are decided as it says when they are
asked (they never reach the inbox). Revoking it makes later requests wait for a person again."""

from django.db import transaction
from django.utils import timezone

from quests.models import Approval, ApprovalStatus, Mission, StandingDecision
from quests.services import machine
from quests.services.access import get_for, require_person
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict, NotFound
from quests.services.locking import lock_mission

# standing decision -> (approval event, approval status)
APPLIES = {"approve": ("approve", ApprovalStatus.APPROVED), "reject": ("reject", ApprovalStatus.REJECTED)}


def standing_decision_make(*, actor: Actor, mission: Mission, approval: Approval) -> StandingDecision:
    """`approval`, just decided with `always` under the mission's lock, stands for its action: the
    one standing before it is replaced, and the other pending requests of that action are
    decided alike."""
    decision = "reject" if approval.status == ApprovalStatus.REJECTED else "approve"
    now = timezone.now()
    replaced = StandingDecision.objects.filter(mission=mission, action=approval.action, revoked_at__isnull=True)
    replaced.update(revoked_at=now, revoked_by=actor.user)
    standing = StandingDecision.objects.create(
        mission=mission,
        action=approval.action,
        decision=decision,
        note=approval.note,
        decided_by=actor.user,
    )
    audit(actor=actor, mission=mission, entity="standing_decision", entity_id=standing.pk, action="make", to_state=decision, tool=approval.action)
    approval.always = True
    approval.save(update_fields=["always"])
    others = mission.approvals.filter(status=ApprovalStatus.PENDING, action=approval.action).exclude(pk=approval.pk)
    standing_decisions_apply(actor=actor, mission=mission, approvals=list(others), standing={approval.action: standing})
    return standing


def standing_decisions_apply(*, actor: Actor, mission: Mission, approvals: list[Approval], standing: dict[str, StandingDecision] | None = None) -> None:
    """Decide the pending `approvals` (of `mission`, locked by the caller) whose action has a
    standing decision, as that decision says, in its maker's name."""
    if standing is None:
        actions = {approval.action for approval in approvals}
        standing = {s.action: s for s in StandingDecision.objects.filter(mission=mission, action__in=actions, revoked_at__isnull=True)}
    for approval in approvals:
        rule = standing.get(approval.action)
        if rule is None or approval.status != ApprovalStatus.PENDING:
            continue
        event, status = APPLIES[rule.decision]
        approval.decided_payload = approval.payload if rule.decision == "approve" else None
        approval.note = rule.note
        approval.decided_at = timezone.now()
        approval.decided_by_id = rule.decided_by_id
        approval.always = True
        machine.move(
            approval,
            event=event,
            to=status,
            actor=actor,
            mission=mission,
            fields=("decided_payload", "note", "decided_at", "decided_by", "always"),
            standing_decision=rule.pk,
        )


def standing_decision_revoke(*, actor: Actor, mission_id: int, standing_id: int) -> StandingDecision:
    """Later requests of the action wait for a person again (those it decided stay decided)."""
    with transaction.atomic():
        require_person(actor)
        standing = get_for(actor, StandingDecision, standing_id)
        if standing.mission_id != mission_id:
            raise NotFound(f"No standing decision with id {standing_id} on mission {mission_id}.")
        lock_mission(mission_id)
        standing.refresh_from_db()
        if standing.revoked_at is not None:
            raise Conflict("This standing decision was already revoked.")
        standing.revoked_at = timezone.now()
        standing.revoked_by = actor.user
        standing.save(update_fields=["revoked_at", "revoked_by"])
        audit(actor=actor, mission=standing.mission, entity="standing_decision", entity_id=standing.pk, action="revoke", to_state="revoked")
        return standing
