"""Staff holds: a hold on one mission or on everything of one user; held state is never purged,
whatever its expiry."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from quests.models import Hold, Mission
from quests.retention.services.policy import require_staff
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict, InvalidInput, NotFound


def hold_place(*, actor: Actor, reason: str, mission_id: int | None = None, username: str | None = None) -> Hold:
    require_staff(actor)
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A hold needs a reason.", field="reason")
    if (mission_id is None) == (not username):
        raise InvalidInput("Name either a quest or a user to hold.", field="mission_id")
    with transaction.atomic():
        mission = user = None
        if mission_id is not None:
            # The mission's row lock orders the hold with a purge of the same mission.
            mission = Mission.objects.select_for_update().filter(pk=mission_id).first()
            if mission is None:
                raise InvalidInput(f"There is no quest with id {mission_id}.", field="mission_id")
        else:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise InvalidInput(f"There is no user “{username}”.", field="username")
        hold = Hold.objects.create(mission=mission, user=user, reason=reason, placed_by=actor.user)
        audit(
            actor=actor,
            mission=mission,
            entity="hold",
            entity_id=hold.pk,
            action="place",
            to_state="active",
            user=user.get_username() if user else None,
        )
        return hold


def hold_release(*, actor: Actor, hold_id: int) -> Hold:
    require_staff(actor)
    with transaction.atomic():
        hold = Hold.objects.select_for_update().filter(pk=hold_id).first()
        if hold is None:
            raise NotFound(f"No hold with id {hold_id}.")
        if hold.released_at is not None:
            raise Conflict("This hold was already released.", code="invalid_transition")
        hold.released_at = timezone.now()
        hold.save(update_fields=["released_at"])
        audit(actor=actor, mission=hold.mission, entity="hold", entity_id=hold.pk, action="release", from_state="active", to_state="released")
        return hold


def active_holds() -> QuerySet[Hold]:
    return Hold.objects.filter(released_at__isnull=True).select_related("mission", "user", "placed_by").order_by("-created_at", "-id")


def held_mission_ids() -> QuerySet:
    return Hold.objects.filter(released_at__isnull=True, mission__isnull=False).values("mission_id")


def held_user_ids() -> QuerySet:
    return Hold.objects.filter(released_at__isnull=True, user__isnull=False).values("user_id")


def is_held(mission: Mission) -> bool:
    return Hold.objects.filter(Q(mission=mission) | Q(user_id=mission.owner_id), released_at__isnull=True).exists()
