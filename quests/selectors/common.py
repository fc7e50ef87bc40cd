"""What the page selectors of more than one module share: the one search rule over missions, the
checkpoint fields a list leaves unread, and how a page windows a list to what needs someone and
the newest of the rest."""

from django.db.models import Case, Count, F, Q, QuerySet, Value, When, Window
from django.db.models.functions import RowNumber

from quests.models import Mission

# Fields a checkpoint list needs not; the state references (shared maps, and the agent delta) stay
# unread until a checkpoint page opens.
HEAVY_CHECKPOINT_FIELDS = ("checkpoint__agent_delta",)


def mission_matches(q: str) -> Q:
    """A mission whose title or objective holds every word of `q` (any case; SQLite and PostgreSQL)."""
    match = Q()
    for word in q.split():
        match &= Q(title__icontains=word) | Q(objective__icontains=word)
    return match


def search_missions(qs: QuerySet[Mission], q: str) -> QuerySet[Mission]:
    return qs.filter(mission_matches(q))


def newest_per_group(group: Q, prefix: str = "") -> dict[str, Window]:
    """Annotations giving each row its place, newest first, among the rows on its side of `group`
    (`<prefix>newest`), and how many rows that side holds (`<prefix>in_group`): a page filters on
    them to read everything on one side and the newest few of the other, with their count, in one
    query whatever the number of rows."""
    side = Case(When(group, then=Value(True)), default=Value(False))
    return {
        f"{prefix}newest": Window(RowNumber(), partition_by=[side], order_by=F("id").desc()),
        f"{prefix}in_group": Window(Count("id"), partition_by=[side]),
    }
