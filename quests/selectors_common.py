"""What the page selectors of more than one module share: the one search rule over missions and
the checkpoint fields a list leaves unread."""

from django.db.models import Q, QuerySet

from quests.models import Mission

# Fields a checkpoint list needs not; the state references stay unread until a checkpoint page opens.
HEAVY_CHECKPOINT_FIELDS = ("checkpoint__state_refs", "checkpoint__agent_state_refs", "checkpoint__compaction_report")


def mission_matches(q: str) -> Q:
    """A mission whose title or objective holds every word of `q` (any case; SQLite and PostgreSQL)."""
    match = Q()
    for word in q.split():
        match &= Q(title__icontains=word) | Q(objective__icontains=word)
    return match


def search_missions(qs: QuerySet[Mission], q: str) -> QuerySet[Mission]:
    return qs.filter(mission_matches(q))
