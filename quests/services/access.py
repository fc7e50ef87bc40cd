"""The one place that decides whether a caller may see an object: another user's objects, and
objects outside an agent token's mission, are 404 (existence is not leaked)."""

from typing import Any, TypeVar, overload

from django.db.models import Model, QuerySet

from checkpoints.models import Checkpoint, Operation
from quests.models import Approval, MemoryItem, MemoryProposal, Milestone, Mission, MissionQuerySet, Run, StandingDecision
from quests.services.audit import Actor
from quests.services.errors import Forbidden, NotFound

M = TypeVar("M", bound=Model)

# How each model reaches its mission (or its owner, for memory).
_MISSION_PATH: dict[type[Model], str] = {
    Mission: "",
    Run: "mission",
    Checkpoint: "mission",
    Operation: "mission",
    Approval: "mission",
    Milestone: "mission",
    MemoryProposal: "mission",
    StandingDecision: "mission",
}


@overload
def visible(actor: Actor, model: type[Mission]) -> MissionQuerySet: ...
@overload
def visible(actor: Actor, model: type[M]) -> QuerySet[M]: ...
def visible(actor: Actor, model: type[M]) -> QuerySet[M]:
    if actor.user is None:
        return model._default_manager.none()
    if model is MemoryItem:
        return model._default_manager.filter(owner=actor.user)
    path = _MISSION_PATH[model]
    prefix = f"{path}__" if path else ""
    qs = model._default_manager.filter(**{f"{prefix}owner": actor.user})
    if actor.token is not None and actor.token.mission_id is not None:
        qs = qs.filter(**{f"{prefix}pk" if not path else f"{path}_id": actor.token.mission_id})
    return qs


def get_for(actor: Actor, model: type[M], pk: int, *, for_update: bool = False, annotations: dict[str, Any] | None = None) -> M:
    """The object if `actor` may see it (else NotFound), with `annotations` read along with it."""
    qs = visible(actor, model)
    if annotations:
        qs = qs.annotate(**annotations)
    if for_update:
        qs = qs.select_for_update(of=("self",))
    obj = qs.filter(pk=pk).first()
    if obj is None:
        raise NotFound(f"No {model._meta.verbose_name} with id {pk}.")
    return obj


def require_whole_account(actor: Actor) -> None:
    """Making a mission: a token limited to one mission sees nothing else, so it makes nothing else."""
    if actor.token is not None and actor.token.mission_id is not None:
        raise Forbidden("This agent token is limited to one mission and cannot create missions.")


def require_person(actor: Actor) -> None:
    """People-only actions: an agent can never approve its own request."""
    if not actor.is_person:
        raise Forbidden("Only a person signed in to Questlog can do this; agent tokens cannot.")
