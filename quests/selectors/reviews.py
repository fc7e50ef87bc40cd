"""What the mission page shows of the person's part: every approval still waiting and the newest
decided ones, every milestone awaiting review and the newest others, the approved ones' badges and
the progress. Each is a fixed number of queries, whatever the number of approvals or milestones
(`quests.selectors.mission` assembles the page)."""

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db.models import Q, QuerySet

from quests.models import AWAITING_REVIEW, Approval, ApprovalStatus, Milestone, Mission, ReviewStatus
from quests.selectors.common import HEAVY_CHECKPOINT_FIELDS, newest_per_group

DECIDED_SHOWN = 10
MILESTONES_SHOWN = 10
BADGES_SHOWN = 10


def approvals(mission: Mission) -> tuple[list[Approval], list[Approval], int]:
    """Every pending approval, the newest DECIDED_SHOWN decided ones and how many are decided in
    all: one query (numbered and counted per group, the pending ones and the decided ones)."""
    rows: list[Any] = list(approvals_shown().filter(mission=mission))  # with newest_per_group's attributes
    waiting = [a for a in rows if a.status == ApprovalStatus.PENDING]
    decided = sorted((a for a in rows if a.status != ApprovalStatus.PENDING), key=lambda a: a.pk, reverse=True)
    return waiting, decided, (decided[0].in_group if decided else 0)


@cache
def approvals_shown() -> QuerySet[Approval]:
    """The approvals `approvals` reads, of every mission: built once per process (0.3 ms on every
    mission page), a mission's being this filtered on it. A filter on a column goes to the query's
    WHERE wherever it is added, so the numbering is the mission's own: the same SQL as filtering
    first (tests/test_views_queries.py holds it)."""
    pending = Q(status=ApprovalStatus.PENDING)
    return Approval.objects.select_related("decided_by").annotate(**newest_per_group(pending)).filter(pending | Q(newest__lte=DECIDED_SHOWN)).order_by("id")


@dataclass
class MilestoneWindow:
    """The milestones the page lists (every one awaiting review, with its review form, and the
    newest MILESTONES_SHOWN others), oldest first, how many others there are, the newest
    BADGES_SHOWN approved ones (the badges) and the progress over all of them."""

    listed: list[Milestone]
    reviewed_total: int
    badges: list[Milestone]
    progress: dict[str, int]


def milestone_window(mission: Mission, *, any_claimed: bool = True) -> MilestoneWindow:
    """Two queries whatever the number of milestones: the number of milestones of each kind and
    review status, which is all the progress rule needs, and the rows shown (numbered newest first
    on each side of "awaiting review", and among the approved ones for the badges). A quest that
    has claimed none (most of them, for most of their life) needs only the first: its numbered
    window costs more to compile than the rest of a page section. `any_claimed` False (the caller
    knows the mission has none): no query."""
    counts = mission.milestones.kind_status_counts() if any_claimed else {}
    progress = mission.progress_of_counts(counts.items())
    if not counts:
        return MilestoneWindow(listed=[], reviewed_total=0, badges=[], progress=progress)
    approved = Q(review_status=ReviewStatus.APPROVED)
    rows: list[Any] = list(  # with newest_per_group's attributes, which the stubs cannot follow
        Milestone.objects.filter(mission=mission)
        .select_related("checkpoint")
        .defer(*HEAVY_CHECKPOINT_FIELDS)
        .annotate(**newest_per_group(AWAITING_REVIEW), **newest_per_group(approved, prefix="approved_"))
        .filter(AWAITING_REVIEW | Q(newest__lte=MILESTONES_SHOWN) | (approved & Q(approved_newest__lte=BADGES_SHOWN)))
        .order_by("id")
    )
    listed = [m for m in rows if m.is_awaiting_review or m.newest <= MILESTONES_SHOWN]
    return MilestoneWindow(
        listed=listed,
        reviewed_total=next((m.in_group for m in rows if not m.is_awaiting_review), 0),
        badges=[m for m in rows if m.review_status == ReviewStatus.APPROVED and m.approved_newest <= BADGES_SHOWN],
        progress=progress,
    )
