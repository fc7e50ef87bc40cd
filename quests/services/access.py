"""The one place that decides whether a caller may see an object: another user's objects, and
objects outside an agent token's mission, are 404 (existence is not leaked)."""

from typing import TypeVar, overload

from django.db.models import Manager, Model, QuerySet

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
def visible(actor: Actor, model: type[Mission], among: QuerySet[Mission] | None = None) -> MissionQuerySet: ...
@overload
def visible(actor: Actor, model: type[M], among: QuerySet[M] | None = None) -> QuerySet[M]: ...
def visible(actor: Actor, model: type[M], among: QuerySet[M] | None = None) -> QuerySet[M]:
    """The objects of `model` the actor may see: all of them, or those of `among` (a queryset of
    `model`, such as one a page annotates once per process)."""
    rows: QuerySet[M] | Manager[M] = among if among is not None else model._default_manager
    if actor.user is None:
        return rows.none()
    if model is MemoryItem:
        return rows.filter(owner=actor.user)
    path = _MISSION_PATH[model]
    prefix = f"{path}__" if path else ""
    qs = rows.filter(**{f"{prefix}owner": actor.user})
    if actor.token is not None and actor.token.mission_id is not None:
        qs = qs.filter(**{f"{prefix}pk" if not path else f"{path}_id": actor.token.mission_id})
    return qs


def get_for(actor: Actor, model: type[M], pk: int, *, for_update: bool = False, among: QuerySet[M] | None = None) -> M:
    """The object if `actor` may see it (else NotFound), read from `among` if given (a queryset of
    `model` with what the caller reads along with it)."""
    qs = visible(actor, model, among)
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
