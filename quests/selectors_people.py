"""Read-side helpers for the pages about a person's own things across missions: the inbox and the
agent tokens. Each page costs the same few queries whatever the number of missions, waiting items
or tokens: the inbox pages in SQL over one union of what waits, the token form searches missions
rather than listing them all."""

import math
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Case, CharField, F, IntegerField, Q, QuerySet, Value, When

from quests.models import AgentToken, Approval, Milestone, Mission, MissionStatus
from quests.selectors_common import HEAVY_CHECKPOINT_FIELDS, mission_matches
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.inbox import inbox_approvals, inbox_milestones

INBOX_PAGE_SIZE = 25
TOKENS_PAGE_SIZE = 25
MISSION_CHOICES = 20


# ---- inbox -------------------------------------------------------------------------------------

@dataclass
class InboxItem:
    kind: str  # "approval" or "milestone"
    obj: Approval | Milestone

    @property
    def created_at(self):
        return self.obj.created_at


@dataclass
class InboxPage:
    items: list[InboxItem]
    # Numbers only (previous, next, of how many): the items are fetched by kind, not by the paginator.
    page: Page
    total: int


def _waiting(user) -> QuerySet:
    """(kind, id, created_at) of everything waiting for this person, both kinds in one statement."""
    def rows(qs: QuerySet, kind: str) -> QuerySet:
        return qs.annotate(item_kind=Value(kind, output_field=CharField())).values_list("item_kind", "id", "created_at").order_by()

    return rows(inbox_approvals(user), "approval").union(rows(inbox_milestones(user), "milestone"), all=True)


def _waiting_page(user, number: int) -> tuple[list[tuple[str, int]], int]:
    """One page of (kind, id), oldest first, and the total, in one query: the ORM cannot count over
    a union in the same statement that slices it, so the union is wrapped by hand."""
    union_sql, params = _waiting(user).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT item_kind, id, COUNT(*) OVER () FROM ({union_sql}) AS waiting ORDER BY created_at, item_kind, id LIMIT %s OFFSET %s",
            [*params, INBOX_PAGE_SIZE, (number - 1) * INBOX_PAGE_SIZE],
        )
        found = cursor.fetchall()
    return [(kind, pk) for kind, pk, _ in found], (found[0][2] if found else 0)


def _page_number(raw: Any) -> int:
    try:
        return max(int(raw), 1)
    except (TypeError, ValueError):
        return 1


def _by_pk(qs: QuerySet, ids: list[int]) -> dict[int, Any]:
    # One query even for no id (Django skips `pk__in=[]`): a page costs the same whatever it holds.
    return {obj.pk: obj for obj in qs.filter(Q(pk__in=ids) if ids else Q(pk=None))}


def inbox(user, page: Any = 1) -> InboxPage:
    """A page of what waits for this person across missions, oldest first: one query for the page
    and the total, one per kind for the objects."""
    number = _page_number(page)
    keys, total = _waiting_page(user, number)
    if not keys and number > 1:
        # Past the end (the last item of the last page was just decided, or a stale link): the last page.
        number = max(math.ceil(_waiting(user).count() / INBOX_PAGE_SIZE), 1)
        keys, total = _waiting_page(user, number)
    approval_ids = [pk for kind, pk in keys if kind == "approval"]
    milestone_ids = [pk for kind, pk in keys if kind == "milestone"]
    objects = {
        "approval": _by_pk(inbox_approvals(user).select_related("mission"), approval_ids),
        "milestone": _by_pk(inbox_milestones(user).select_related("mission", "checkpoint").defer(*HEAVY_CHECKPOINT_FIELDS), milestone_ids),
    }
    # An item decided between the two queries is simply left out of this page.
    items = [InboxItem(kind, objects[kind][pk]) for kind, pk in keys if pk in objects[kind]]
    return InboxPage(items=items, page=Paginator(range(total), INBOX_PAGE_SIZE).get_page(number), total=total)


# ---- tokens ------------------------------------------------------------------------------------

def tokens(user, page: Any = 1) -> Page:
    """A page of the person's tokens, the ones in use first. Tokens are few, but revoked ones stay
    listed for the record, so the list grows with time: paged like every other list."""
    qs = (
        AgentToken.objects.filter(user=user)
        .select_related("mission")
        .order_by(F("revoked_at").asc(nulls_first=True), "name", "-created_at", "id")
    )
    return Paginator(qs, TOKENS_PAGE_SIZE).get_page(page)


def token_missions(user) -> QuerySet[Mission]:
    """The missions a token may be limited to: the person's open ones."""
    return visible(Actor(user=user), Mission).exclude(status__in=[MissionStatus.CANCELLED, MissionStatus.COMPLETED])


@dataclass
class MissionChoices:
    missions: list[Mission]
    searched: bool
    # More open missions match than are offered: the person should add words.
    more: bool


def token_mission_choices(user, q: str | None, chosen: int | None) -> MissionChoices:
    """At most MISSION_CHOICES open missions matching the search, newest activity first, the one
    already chosen kept in front so a new search does not drop it. Nothing is listed before a
    search: the form's size does not depend on how many missions the person has."""
    if q is None and chosen is None:
        return MissionChoices(missions=[], searched=False, more=False)
    qs = token_missions(user)
    if q is None:
        qs = qs.filter(pk=chosen)
    elif q.split():
        qs = qs.filter(mission_matches(q) | Q(pk=chosen))
    found = list(
        qs.annotate(is_chosen=Case(When(pk=chosen, then=1), default=0, output_field=IntegerField()))
        .order_by("-is_chosen", "-updated_at", "-id")
        .only("id", "title", "updated_at")[: MISSION_CHOICES + 1]
    )
    return MissionChoices(missions=found[:MISSION_CHOICES], searched=q is not None, more=len(found) > MISSION_CHOICES)
