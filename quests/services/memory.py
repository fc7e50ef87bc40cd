"""Long-term memory about a person: agents may only propose; an item exists only with consent."""

from datetime import timedelta

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from checkpoints.models import RetentionPolicy
from quests.engine import writes
from quests.models import MemoryItem, MemoryProposal
from quests.services import idempotency, machine, tokens
from quests.services.access import get_for, require_person
from quests.services.audit import Actor, audit
from quests.services.errors import InvalidInput
from quests.services.locking import fence


@idempotency.retried_on_key_race
def memory_propose(
    *, actor: Actor | writes.Credentials, run_id: int, name: str, value: str, reason: str, key: str | None = None
) -> tuple[MemoryProposal, bool]:
    keyed = idempotency.keyed("memory-proposals", key, {"name": name, "value": value, "reason": reason})
    with transaction.atomic():
        actor, locked = tokens.run_locked_for(actor, run_id, keyed)
        run, mission = locked.run, locked.mission
        replayed = idempotency.replayed(keyed, locked.replay)
        if replayed is not None:
            return MemoryProposal.objects.get(pk=replayed), True
        fence(run, mission)
        proposal = MemoryProposal.objects.create(owner=mission.owner, mission=mission, run=run, name=name, value=value, reason=reason)
        audit(actor=actor, mission=mission, entity="memory_proposal", entity_id=proposal.pk, action="propose", to_state="pending")
        idempotency.remember_keyed(keyed, mission=mission, object_id=proposal.pk)
        return proposal, False


def memory_decide(*, actor: Actor, proposal_id: int, decision: str) -> MemoryProposal:
    with transaction.atomic():
        require_person(actor)
        proposal = get_for(actor, MemoryProposal, proposal_id, for_update=True)
        machine.require(proposal, "approve")
        if decision not in machine.MEMORY_PROPOSAL_TRANSITIONS:
            raise InvalidInput("decision must be approve or decline.", field="decision")
        now = timezone.now()
        if decision == "approve":
            MemoryItem.objects.create(
                owner=proposal.owner,
                name=proposal.name,
                value=proposal.value,
                source_mission=proposal.mission,
                proposal=proposal,
                approved_at=now,
                retention_approved_at=now,
                expires_at=now + timedelta(days=RetentionPolicy.current().memory_max_days),
            )
        proposal.decided_at = now
        to = MemoryProposal.Status.APPROVED if decision == "approve" else MemoryProposal.Status.DECLINED
        machine.move(proposal, event=decision, to=to, actor=actor, mission=proposal.mission, fields=("decided_at",))
        return proposal


def memory_forget(*, actor: Actor, item_id: int) -> None:
    with transaction.atomic():
        require_person(actor)
        item = get_for(actor, MemoryItem, item_id, for_update=True)
        audit(actor=actor, mission=None, entity="memory_item", entity_id=item.pk, action="forget", from_state="kept", to_state="deleted")
        item.delete()


def memory_renew(*, actor: Actor, item_id: int) -> MemoryItem:
    with transaction.atomic():
        require_person(actor)
        item = get_for(actor, MemoryItem, item_id, for_update=True)
        item.expires_at = timezone.now() + timedelta(days=RetentionPolicy.current().memory_max_days)
        item.retention_approved_at = timezone.now()
        item.save(update_fields=["expires_at", "retention_approved_at"])
        audit(actor=actor, mission=None, entity="memory_item", entity_id=item.pk, action="renew")
        return item


def memory_for(user) -> QuerySet[MemoryItem]:
    """The items kept about `user` (a user or a user's id) that have not expired."""
    now = timezone.now()
    return MemoryItem.objects.filter(owner=user).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
