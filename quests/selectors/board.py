"""Read-side helpers for the pages. Each one loads what a page shows in a fixed number of queries,
whatever the number of missions, milestones or checkpoints (annotate + prefetch, never a query per
row). Decisions about state (next action, messages, what is allowed) come from the services."""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypedDict

from django.core.paginator import Page, Paginator
from django.db.models import Count, Max, QuerySet
from django.template.defaultfilters import pluralize

from quests.models import Milestone, Mission, MissionStatus, ReviewStatus
from quests.selectors.common import search_missions
from quests.services import machine
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.bundle import pending_annotations, pending_of
from quests.templatetags.questlog import milestone_kind


class NextStep(TypedDict):
    """The one thing a person can do next on a quest: a link, or a button that posts."""

    label: str
    url: str
    post: bool
    primary: bool  # drawn as the page's main action: a person is what the quest waits for
    page: str  # the quest's own page


class QuestCard(TypedDict):
    """What one card on the board prints, worked out in Python and flat: the template engine finds
    `card.key` in a dict at its first try (an object costs it a failed `obj[key]` first), and a
    board page renders up to BOARD_PAGE_SIZE of them on every load and every poll."""

    id: int
    title: str
    status: str
    status_label: str
    running: bool
    message: str
    planned: int
    approved: int
    progress_text: str
    badges: list[tuple[str, str]]  # (kind label, title) of each approved milestone
    step: NextStep
    # Two quests may share a title: their number and age tell them apart; the last change says
    # which one is alive.
    created_at: datetime
    updated_at: datetime


# What a card offers for each next action: its label, where on the quest's page it leads, and
# whether it is the main action (the quest waits for the person).
STEPS = {
    "await_approval": ("Review now", "#approvals", True),
    "await_user": ("Look at it", "", False),
    "in_progress": ("Watch progress", "", False),
    "reconcile": ("Check the ledger", "#ledger", True),
    "retry_external": ("See what blocks it", "", False),
    "none": ("Look back", "", False),
}


def next_step(mission: Mission, action: str) -> NextStep:
    page = f"/missions/{mission.pk}/"
    if action == "await_user" and mission.status == MissionStatus.PAUSED:
        return {"label": "Resume", "url": f"{page}unpause/", "post": True, "primary": True, "page": page}
    text, anchor, primary = STEPS.get(action, ("Open quest", "", False))
    return {"label": text, "url": page + anchor, "post": False, "primary": primary, "page": page}


# A card never shows these: the current save-state document (its references grow with the mission)
# and the objective (searched in SQL, not shown).
BOARD_UNREAD_FIELDS = ("objective", "state_refs", "state_pending", "state_report")


# Newest activity first, read along the mission_owner_active index.
BOARD_ORDER = ("-updated_at", "-id")


def _matching(user, status: str | None, q: str) -> QuerySet[Mission]:
    """The person's missions the board's filter and search select."""
    qs = search_missions(visible(Actor(user=user), Mission), q)
    return qs.filter(status=status) if status else qs


def board_missions(user, status: str | None = None, q: str = "") -> QuerySet[Mission]:
    """The user's missions with what the board's cards need of their approvals, ledger, runs and
    gates annotated (`pending_annotations`, as the mission page's sentence reads them), newest
    activity first: one query for a page of them (their milestones are one more, `milestone_rows`)."""
    return _matching(user, status, q).annotate(**pending_annotations()).defer(*BOARD_UNREAD_FIELDS).order_by(*BOARD_ORDER)


def milestone_rows(missions: list[Mission]) -> dict[int, list[Any]]:
    """What a card reads of each mission's milestones (kind, title, review status), in the order
    they were claimed: plain rows, as building a model instance for each costs more than the card."""
    rows: dict[int, list[Any]] = defaultdict(list)
    for row in Milestone.objects.filter(mission__in=missions).values_list("mission_id", "kind", "title", "review_status", named=True):
        rows[row.mission_id].append(row)
    return rows


def quest_card(mission: Mission, milestones: list[Any]) -> QuestCard:
    """`mission` comes from board_missions, `milestones` from milestone_rows."""
    pending = pending_of(mission)
    action = machine.next_action(mission, pending)
    progress = mission.progress_of(milestones)
    planned, approved = progress["planned"], progress["approved"]
    return {
        "id": mission.pk,
        "title": mission.title,
        "status": mission.status,
        "status_label": machine.status_label(mission.status, waits_for_review=not pending.approval_action and bool(pending.milestone_title)),
        "running": mission.status == MissionStatus.RUNNING,
        "message": machine.message(mission, action, pending),
        "planned": planned,
        "approved": approved,
        "progress_text": f"{approved} of {planned} milestone{pluralize(planned)} approved",
        "badges": [(milestone_kind(m.kind), m.title) for m in milestones if m.review_status == ReviewStatus.APPROVED],
        "step": next_step(mission, action),
        "created_at": mission.created_at,
        "updated_at": mission.updated_at,
    }


BOARD_PAGE_SIZE = 25


def _by_status(missions: QuerySet[Mission]) -> dict[str, dict[str, Any]]:
    """Per status: how many missions and their latest change (updated_at moves with every status
    change). One query, answered from the mission_owner_status index alone. The save-state version
    is not summed here: it changes with every checkpoint, and an index carrying it would turn each
    checkpoint's update of its mission into a non-HOT one."""
    rows = missions.values("status").annotate(n=Count("*"), u=Max("updated_at")).order_by()
    return {row["status"]: dict(row) for row in rows}


def _version(matched: dict[str, dict[str, Any]], page_versions: Iterable[int]) -> str:
    """Changes whenever what the page shows may have changed: how many quests are in each status,
    the latest change of any of them (a quest moving onto the page, or off it, changes one of the
    two), and the save state of the quests on the page itself."""
    latest = max((row["u"] for row in matched.values()), default=None)
    counts = ",".join(f"{status}:{row['n']}" for status, row in sorted(matched.items()))
    return f"{counts}.{latest.timestamp() if latest else 0}.{sum(page_versions)}"


def _page_of(missions: QuerySet[Mission, Any], counts: dict[str, int], status: str | None, page: Any) -> Page:
    paginator = Paginator(missions, BOARD_PAGE_SIZE)
    # The counts per status already say how many quests the page walks through: no second count.
    paginator.count = counts.get(status, 0) if status else sum(counts.values())
    return paginator.get_page(page)


def board(user, status: str | None = None, q: str = "", page: Any = 1) -> dict[str, Any]:
    """One page of the board, the exact count per status of what the search matches and the
    version its poll compares: the page's cost does not depend on how many quests there are."""
    matched = _by_status(_matching(user, None, q))
    counts = {value: row["n"] for value, row in matched.items()}
    found = _page_of(board_missions(user, status, q), counts, status, page)
    shown = list(found.object_list)
    milestones = milestone_rows(shown)
    cards = [quest_card(m, milestones[m.pk]) for m in shown]
    return {
        "page": found,
        "cards": cards,
        "status_counts": [(value, label, counts.get(value, 0)) for value, label in MissionStatus.choices],
        "total": sum(counts.values()),
        # Whether to explain how a first quest starts: not when a search merely found nothing.
        "any_quest": bool(matched) or (bool(q) and has_quests(user)),
        "any_running": counts.get(MissionStatus.RUNNING, 0) > 0,
        "version": _version(matched, (m.state_version for m in shown)),
    }


def board_version(user, status: str | None = None, q: str = "", page: Any = 1) -> str:
    """What the board's poll compares, for the page it shows (two light queries: no cards)."""
    matched = _by_status(_matching(user, None, q))
    versions = _matching(user, status, q).order_by(*BOARD_ORDER).values_list("state_version", flat=True)
    found = _page_of(versions, {value: row["n"] for value, row in matched.items()}, status, page)
    return _version(matched, found.object_list)


def has_quests(user) -> bool:
    return visible(Actor(user=user), Mission).exists()


def mission_version(mission: Mission) -> str:
    return f"{mission.state_version}.{mission.head_checkpoint_id}.{mission.updated_at.timestamp()}"
