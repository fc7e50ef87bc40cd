"""Read-side helpers for the pages about a person's own things across missions: the inbox and the
agent tokens. Each page costs the same few queries whatever the number of missions, waiting items
or tokens: the inbox slices its page in SQL out of one union of what waits, the token form searches
missions rather than listing them all."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Case, CharField, Count, DateTimeField, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from quests.models import AgentToken, Approval, ApprovalStatus, MemoryProposal, Milestone, Mission, MissionStatus
from quests.selectors.common import HEAVY_CHECKPOINT_FIELDS, mission_matches
from quests.services.access import visible
from quests.services.approvals import run_started_since_decision, undo_refusal, undo_until
from quests.services.audit import Actor

INBOX_PAGE_SIZE = 25
TOKENS_PAGE_SIZE = 25
MISSION_CHOICES = 20
# The inbox's quest filter offers at most this many quests.
INBOX_QUEST_CHOICES = 30


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
    # Memory proposals waiting too: decided on the Memory page, counted in the navigation's badge.
    proposals: int = 0

    @property
    def badge_count(self) -> int:
        return self.total + self.proposals


INBOX_KINDS = {"approval": "Approvals", "milestone": "Milestones"}


@dataclass(frozen=True)
class InboxFilter:
    """What a person narrowed the inbox to: one quest, one kind, or both (None: everything)."""

    mission_id: int | None = None
    kind: str | None = None

    @property
    def active(self) -> bool:
        return self.mission_id is not None or self.kind is not None

    def waiting(self, user) -> tuple[QuerySet, QuerySet]:
        """The person's waiting approvals and milestones, narrowed."""
        approvals, milestones = inbox_approvals(user), inbox_milestones(user)
        if self.mission_id is not None:
            approvals, milestones = approvals.filter(mission_id=self.mission_id), milestones.filter(mission_id=self.mission_id)
        if self.kind == "approval":
            milestones = milestones.none()
        elif self.kind == "milestone":
            approvals = approvals.none()
        return approvals, milestones


def _waiting(approvals: QuerySet, milestones: QuerySet) -> QuerySet:
    """(kind, id, blocks, respond_by, created_at) of everything waiting for this person, both kinds
    in one statement. `blocks` is 1 for what an agent waits on: every pending approval (its run
    ended to ask) and a gate milestone; a milestone that is no gate blocks no one."""

    def rows(qs: QuerySet, kind: str, blocks: Any, respond_by: Any) -> QuerySet:
        return (
            qs.annotate(
                item_kind=Value(kind, output_field=CharField()),
                blocks=blocks,
                due=respond_by,
            )
            .values_list("item_kind", "id", "blocks", "due", "created_at")
            .order_by()
        )

    no_deadline = Value(None, output_field=DateTimeField())
    return rows(approvals, "approval", Value(1, output_field=IntegerField()), F("respond_by")).union(
        rows(milestones, "milestone", Case(When(gate=True, then=1), default=0, output_field=IntegerField()), no_deadline),
        all=True,
    )


# What blocks an agent first, then the nearest deadline, then the oldest.
INBOX_ORDER = (F("blocks").desc(), F("due").asc(nulls_last=True), "created_at", "id", "item_kind")


def _by_pk(qs: QuerySet, ids: list[int]) -> dict[int, Any]:
    # One query even for no id (Django skips `pk__in=[]`): a page costs the same whatever it holds.
    return {obj.pk: obj for obj in qs.filter(Q(pk__in=ids) if ids else Q(pk=None))}


def inbox(user, page: Any = 1, narrowed: InboxFilter = InboxFilter()) -> InboxPage:
    """A page of what waits for this person across missions, in INBOX_ORDER. The total is the
    navigation's inbox count (the page hands it on, so it is counted once) unless the inbox is
    narrowed; then one query slices the page out of both kinds in SQL, and one per kind fetches
    its objects."""
    approvals, milestones = narrowed.waiting(user)
    total = approvals.count() + milestones.count() if narrowed.active else inbox_items_count(user)
    numbers = Paginator(range(total), INBOX_PAGE_SIZE).get_page(page)
    start = (numbers.number - 1) * INBOX_PAGE_SIZE
    keys = [(kind, pk) for kind, pk, *_ in _waiting(approvals, milestones).order_by(*INBOX_ORDER)[start : start + INBOX_PAGE_SIZE]]
    objects = {
        "approval": _by_pk(approvals.select_related("mission"), [pk for kind, pk in keys if kind == "approval"]),
        "milestone": _by_pk(
            milestones.select_related("mission", "checkpoint").defer(*HEAVY_CHECKPOINT_FIELDS),
            [pk for kind, pk in keys if kind == "milestone"],
        ),
    }
    # An item decided between the queries is simply left out of this page.
    items = [InboxItem(kind, objects[kind][pk]) for kind, pk in keys if pk in objects[kind]]
    return InboxPage(items=items, page=numbers, total=total, proposals=memory_proposals_waiting(user).count())


@dataclass
class QuestChoices:
    """The quests the inbox's filter offers, and whether more have something waiting."""

    quests: list[Mission]
    more: bool


def inbox_quests(user, chosen: int | None = None) -> QuestChoices:
    """The quests something waits in, for the inbox's quest filter: at most INBOX_QUEST_CHOICES,
    those with the most waiting first, the one chosen always among them (one query). A person with
    thousands of quests waiting would otherwise get a list of thousands (issue 13: a page's size
    must not grow with the data); any other quest's items are a link away on its own page. Their
    ids are one UNION, so the database reads the missions by key; `IN (…) OR IN (…)` read every
    mission of every person (a sequential scan: 12 ms at 26,000 missions, 0.1 ms this way)."""
    approvals, milestones = inbox_approvals(user), inbox_milestones(user)
    waiting_in = approvals.values("mission_id").union(milestones.values("mission_id"))
    found: list[Mission] = list(
        Mission.objects.filter(pk__in=waiting_in)
        .annotate(
            is_chosen=Case(When(pk=chosen, then=1), default=0, output_field=IntegerField()),
            waiting=_waiting_count(approvals) + _waiting_count(milestones),
        )
        .only("id", "title", "created_at")
        .order_by("-is_chosen", "-waiting", "title", "id")[: INBOX_QUEST_CHOICES + 1]
    )
    shown = sorted(found[:INBOX_QUEST_CHOICES], key=lambda m: (m.title, m.pk))
    return QuestChoices(quests=shown, more=len(found) > INBOX_QUEST_CHOICES)


def _waiting_count(waiting: QuerySet) -> Coalesce:
    """How many of `waiting` belong to the outer query's mission."""
    per_mission = waiting.filter(mission_id=OuterRef("pk")).order_by().values("mission_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(per_mission, output_field=IntegerField()), 0)


# What a decision did, in the words of the confirmation (the approval's or milestone's status).
DECIDED_WORDS = {
    "approved": "You approved",
    "edited": "You approved your edited version of",
    "rejected": "You rejected",
    "corrected": "You corrected",
}
RECENT_DECISIONS = 3


@dataclass
class RecentDecision:
    """A decision this person just made, for the confirmation that replaces the item they decided."""

    kind: str  # "approval" or "milestone"
    obj: Approval | Milestone
    at: datetime
    # Until when the Undo button is offered; None: this decision cannot be undone (any more).
    undo_until: datetime | None

    @property
    def words(self) -> str:
        obj = self.obj
        if isinstance(obj, Approval):
            status, what = obj.status, f"“{obj.action}”"
        else:
            status, what = obj.review_status, f"the milestone “{obj.title}”"
        return f"{DECIDED_WORDS.get(status, 'You decided')} {what}."


def recent_decisions(user, now: datetime | None = None, *, mission_id: int | None = None) -> list[RecentDecision]:
    """This person's newest decisions and reviews of the undo window (QUESTLOG_UNDO_SECONDS), with
    whether each can still be undone (the service's rule). Two small queries."""
    now = now or timezone.now()
    since = now - timedelta(seconds=settings.QUESTLOG_UNDO_SECONDS)
    decided = (
        Approval.objects.filter(decided_by=user, decided_at__gte=since)
        .annotate(run_since=run_started_since_decision())
        .select_related("mission")
        .order_by("-decided_at")
    )
    reviewed = Milestone.objects.filter(reviewed_by=user, reviewed_at__gte=since).select_related("mission").order_by("-reviewed_at")
    if mission_id is not None:
        decided, reviewed = decided.filter(mission_id=mission_id), reviewed.filter(mission_id=mission_id)
    # Both times are set on every row the queries read (they filter on them).
    found = [RecentDecision("approval", a, a.decided_at, None) for a in decided[:RECENT_DECISIONS] if a.decided_at is not None]
    found += [RecentDecision("milestone", m, m.reviewed_at, None) for m in reviewed[:RECENT_DECISIONS] if m.reviewed_at is not None]
    found = sorted(found, key=lambda d: d.at, reverse=True)[:RECENT_DECISIONS]
    for decision in found:
        approval: Any = decision.obj  # for an approval, annotated with run_since by the query above
        if decision.kind == "approval" and undo_refusal(approval, approval.mission, by=user, now=now, run_since=approval.run_since) is None:
            decision.undo_until = undo_until(approval)
    return found


# ---- tokens ------------------------------------------------------------------------------------


def tokens(user, page: Any = 1) -> Page:
    """A page of the person's tokens, the ones in use first. Tokens are few, but revoked ones stay
    listed for the record, so the list grows with time: paged like every other list."""
    qs = AgentToken.objects.filter(user=user).select_related("mission").order_by(F("revoked_at").asc(nulls_first=True), "name", "-created_at", "id")
    return Paginator(qs, TOKENS_PAGE_SIZE).get_page(page)


def token_missions(user) -> QuerySet[Mission]:
    """The missions a token may be limited to: the person's open ones."""
    return visible(Actor(user=user), Mission).exclude(status__in=[MissionStatus.CANCELLED, MissionStatus.COMPLETED])


@dataclass
class MissionChoices:
    missions: Sequence[Mission]
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
        assert chosen is not None  # returned above when both are None
        qs = qs.filter(pk=chosen)
    elif q.split():
        qs = qs.filter(mission_matches(q) | Q(pk=chosen))
    found = list(
        qs.annotate(is_chosen=Case(When(pk=chosen, then=1), default=0, output_field=IntegerField()))
        .order_by("-is_chosen", "-updated_at", "-id")
        .only("id", "title", "updated_at")[: MISSION_CHOICES + 1]
    )
    return MissionChoices(missions=found[:MISSION_CHOICES], searched=q is not None, more=len(found) > MISSION_CHOICES)


# The counts of what waits for a person (the inbox page and the navigation's badge).
def inbox_approvals(user):
    return Approval.objects.filter(owner=user, status=ApprovalStatus.PENDING)


def inbox_milestones(user):
    """Gate milestones wait on a person; others are reviewable too but do not block."""
    return Milestone.objects.awaiting_review().filter(owner=user)


def memory_proposals_waiting(user):
    """What an agent asked to remember, waiting for the person's decision (on the Memory page)."""
    return MemoryProposal.objects.filter(owner=user, status=MemoryProposal.Status.PENDING)


def _ids(qs):
    return qs.values("id").order_by()


def inbox_items_count(user) -> int:
    """What the inbox page lists: approvals and milestones (one query)."""
    return _ids(inbox_approvals(user)).union(_ids(inbox_milestones(user)), all=True).count()


def inbox_count(user) -> int:
    """The navigation's badge: everything waiting for the person, memory proposals included (one query)."""
    return _ids(inbox_approvals(user)).union(_ids(inbox_milestones(user)), _ids(memory_proposals_waiting(user)), all=True).count()
