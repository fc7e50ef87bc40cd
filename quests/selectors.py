"""Read-side helpers for the pages. Each one loads what a page shows in a fixed number of queries,
whatever the number of missions, milestones or checkpoints (annotate + prefetch, never a query per
row). Decisions about state (next action, messages, what is allowed) come from the services."""

from dataclasses import dataclass, field
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, Exists, Max, OuterRef, Prefetch, QuerySet, Subquery, Sum

from checkpoints.models import Checkpoint, Operation, OperationStatus, Record
from quests.models import (
    Approval,
    ApprovalStatus,
    Constraint,
    Milestone,
    Mission,
    MissionStatus,
    ReviewStatus,
    Run,
)
from quests.services import machine
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.bundle import resume_bundle
from quests.selectors_common import HEAVY_CHECKPOINT_FIELDS, search_missions
from quests.selectors_people import TOKENS_PAGE_SIZE, InboxItem, inbox, token_mission_choices, token_missions, tokens

CHECKPOINT_LIST_FIELDS = ("id", "mission_id", "run_id", "parent_id", "seq", "trigger", "verified", "note", "created_at", "hash", "size_bytes")


@dataclass
class NextStep:
    """The one thing a person can do next on a quest: a link, or a button that posts."""

    label: str
    url: str
    post: bool = False


@dataclass
class QuestCard:
    mission: Mission
    next_action: str
    message: str
    progress: dict[str, int]
    badges: list[Milestone]
    step: NextStep

    @property
    def percent(self) -> int:
        planned = self.progress["planned"]
        return round(100 * self.progress["approved"] / planned) if planned else 0


def _pending_from(mission: Mission, milestones: list[Milestone]) -> machine.Pending:
    return machine.Pending(
        approval_action=mission.pending_approval_action,
        milestone_title=next((m.title for m in milestones if m.is_gate_awaiting_review), None),
        any_attempted=mission.any_attempted,
        run_number=mission.active_run_number,
    )


def next_step(mission: Mission, action: str) -> NextStep:
    page = f"/missions/{mission.pk}/"
    if action == "await_user" and mission.status == MissionStatus.PAUSED:
        return NextStep("Resume", f"{page}unpause/", post=True)
    return {
        "await_approval": NextStep("Review now", f"{page}#approvals"),
        "await_user": NextStep("Look at it", page),
        "in_progress": NextStep("Watch progress", page),
        "reconcile": NextStep("Check the ledger", f"{page}#ledger"),
        "retry_external": NextStep("See what blocks it", page),
        "none": NextStep("Look back", page),
    }.get(action, NextStep("Open quest", page))


def board_missions(user, status: str | None = None, q: str = "") -> QuerySet[Mission]:
    """The user's missions with what the board needs annotated, newest activity first: two
    queries for a page of them."""
    qs = search_missions(visible(Actor(user=user), Mission), q)
    if status:
        qs = qs.filter(status=status)
    return qs.annotate(
        pending_approval_action=Subquery(
            Approval.objects.filter(mission=OuterRef("pk"), status=ApprovalStatus.PENDING).order_by("id").values("action")[:1]
        ),
        any_attempted=Exists(Operation.objects.filter(mission=OuterRef("pk"), status=OperationStatus.ATTEMPTED)),
        active_run_number=Subquery(Run.objects.filter(mission=OuterRef("pk"), ended_at__isnull=True).values("number")[:1]),
    ).prefetch_related(
        Prefetch(
            "milestones",
            queryset=Milestone.objects.only("id", "mission_id", "kind", "title", "review_status", "gate", "withdrawn"),
        )
    ).order_by("-updated_at", "-id")


def quest_card(mission: Mission) -> QuestCard:
    milestones = list(mission.milestones.all())
    pending = _pending_from(mission, milestones)
    action = machine.next_action(mission, pending)
    approved = [m for m in milestones if m.review_status == ReviewStatus.APPROVED]
    return QuestCard(
        mission=mission,
        next_action=action,
        message=machine.message(mission, action, pending),
        progress=mission.progress_of(milestones),
        badges=approved,
        step=next_step(mission, action),
    )


BOARD_PAGE_SIZE = 25


def board(user, status: str | None = None, q: str = "", page: Any = 1) -> dict[str, Any]:
    """One page of the board and the exact count per status of what the search matches: the
    page's cost does not depend on how many quests there are."""
    counts = dict(search_missions(visible(Actor(user=user), Mission), q).values_list("status").annotate(n=Count("id")).order_by())
    paginator = Paginator(board_missions(user, status, q), BOARD_PAGE_SIZE)
    # The counts per status already say how many quests the page walks through: no second count.
    paginator.count = counts.get(status, 0) if status else sum(counts.values())
    found = paginator.get_page(page)
    cards = [quest_card(m) for m in found.object_list]
    return {
        "page": found,
        "cards": cards,
        "status_counts": [(value, label, counts.get(value, 0)) for value, label in MissionStatus.choices],
        "total": sum(counts.values()),
        "any_running": counts.get(MissionStatus.RUNNING, 0) > 0,
    }


def has_quests(user) -> bool:
    return visible(Actor(user=user), Mission).exists()


def board_version(user) -> str:
    """Changes whenever anything a quest card shows may have changed (one query)."""
    agg = visible(Actor(user=user), Mission).aggregate(v=Sum("state_version"), u=Max("updated_at"), n=Count("id"))
    return f"{agg['n']}.{agg['v'] or 0}.{agg['u'].timestamp() if agg['u'] else 0}"


def mission_version(mission: Mission) -> str:
    return f"{mission.state_version}.{mission.head_checkpoint_id}.{mission.updated_at.timestamp()}"


# ---- mission page -----------------------------------------------------------------------------

@dataclass
class TreeNode:
    checkpoint: Checkpoint
    x: int
    y: int
    on_branch: bool
    is_head: bool
    parent: "TreeNode | None" = None

    @property
    def edge_path(self) -> str:
        """The SVG path from the parent: straight along a lane, a curve where a branch starts."""
        if self.parent is None:
            return ""
        x1, y1, x2, y2 = self.parent.x, self.parent.y, self.x, self.y
        if y1 == y2:
            return f"M{x1} {y1} L{x2} {y2}"
        bend = (x2 - x1) / 2
        return f"M{x1} {y1} C{x1 + bend} {y1} {x2 - bend} {y2} {x2} {y2}"


@dataclass
class CheckpointTree:
    nodes: list[TreeNode]
    width: int
    height: int
    lanes: int

    @property
    def edges(self) -> list[tuple[TreeNode, TreeNode]]:
        return [(n.parent, n) for n in self.nodes if n.parent is not None]


TREE_STEP_X = 34
TREE_STEP_Y = 30
TREE_PAD = 18


def checkpoint_tree(checkpoints: list[Checkpoint], head_id: int | None) -> CheckpointTree:
    """Lay the checkpoint tree out in lanes: the current branch (ancestors of the head) runs along
    the top lane; every branch set aside by a restore gets a lane of its own below."""
    by_id = {c.pk: c for c in checkpoints}
    on_branch: set[int] = set()
    cursor = by_id.get(head_id) if head_id else None
    while cursor is not None and cursor.pk not in on_branch:
        on_branch.add(cursor.pk)
        cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
    ordered = sorted(checkpoints, key=lambda c: c.seq)
    children: dict[int | None, list[Checkpoint]] = {}
    for c in ordered:
        children.setdefault(c.parent_id if c.parent_id in by_id else None, []).append(c)

    def primary_child(parent_id: int) -> int | None:
        kids = children.get(parent_id, [])
        for kid in kids:
            if kid.pk in on_branch:
                return kid.pk
        return kids[0].pk if kids else None

    lane_of: dict[int, int] = {}
    next_lane = 1
    nodes: dict[int, TreeNode] = {}
    for index, c in enumerate(ordered):
        parent = by_id.get(c.parent_id) if c.parent_id else None
        if parent is not None and parent.pk in lane_of and primary_child(parent.pk) == c.pk:
            lane = lane_of[parent.pk]
        elif c.pk in on_branch:
            lane = 0
        else:
            lane, next_lane = next_lane, next_lane + 1
        lane_of[c.pk] = lane
        nodes[c.pk] = TreeNode(
            checkpoint=c,
            x=TREE_PAD + index * TREE_STEP_X,
            y=TREE_PAD + lane * TREE_STEP_Y,
            on_branch=c.pk in on_branch,
            is_head=c.pk == head_id,
            parent=None,
        )
    for node in nodes.values():
        if node.checkpoint.parent_id in nodes:
            node.parent = nodes[node.checkpoint.parent_id]
    lanes = (max(lane_of.values()) + 1) if lane_of else 1
    return CheckpointTree(
        nodes=list(nodes.values()),
        width=2 * TREE_PAD + max(len(ordered) - 1, 0) * TREE_STEP_X,
        height=2 * TREE_PAD + (lanes - 1) * TREE_STEP_Y,
        lanes=lanes,
    )


@dataclass
class TimelineEntry:
    """One run with the checkpoints it wrote, or a checkpoint no run wrote (a restore, a pause)."""

    at: Any
    run: Run | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)


def timeline(runs: list[Run], checkpoints: list[Checkpoint]) -> list[TimelineEntry]:
    by_run: dict[int, TimelineEntry] = {r.pk: TimelineEntry(at=r.started_at, run=r) for r in runs}
    loose: list[TimelineEntry] = []
    for c in sorted(checkpoints, key=lambda c: c.seq):
        if c.run_id in by_run:
            by_run[c.run_id].checkpoints.append(c)
        else:
            loose.append(TimelineEntry(at=c.created_at, checkpoints=[c]))
    return sorted([*by_run.values(), *loose], key=lambda e: e.at, reverse=True)


@dataclass
class MissionPage:
    mission: Mission
    bundle: dict[str, Any]
    constraints: list[Constraint]
    pending_approvals: list[Approval]
    decided_approvals: list[Approval]
    milestones: list[Milestone]
    runs: list[Run]
    checkpoints: list[Checkpoint]
    tree: CheckpointTree
    timeline: list[TimelineEntry]
    operations: list[dict[str, Any]]
    progress: dict[str, int]
    badges: list[Milestone]
    restore_default: Checkpoint | None
    can: dict[str, bool]

    @property
    def running(self) -> bool:
        return self.mission.status == MissionStatus.RUNNING

    @property
    def percent(self) -> int:
        planned = self.progress["planned"]
        return round(100 * self.progress["approved"] / planned) if planned else 0

    @property
    def records(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        sections = [
            ("open_questions", "Open questions"),
            ("blockers", "Blockers"),
            ("dependencies", "Dependencies"),
            ("decisions", "Decisions"),
        ]
        return [(key, label, self.bundle[key]) for key, label in sections]


def mission_page(mission: Mission) -> MissionPage:
    """Everything the mission page shows. The sentence, the next action, the live records and the
    ledger come from the resume bundle, so the page says exactly what the next run is told."""
    bundle = resume_bundle(mission)
    constraints = list(Constraint.objects.filter(mission=mission).select_related("replaces").order_by("id"))
    approvals = list(Approval.objects.filter(mission=mission).order_by("id"))
    milestones = list(
        Milestone.objects.filter(mission=mission).select_related("checkpoint").defer(*HEAVY_CHECKPOINT_FIELDS).order_by("id")
    )
    runs = list(Run.objects.filter(mission=mission).order_by("number"))
    checkpoints = list(Checkpoint.objects.filter(mission=mission).only(*CHECKPOINT_LIST_FIELDS).order_by("-seq"))
    evidence_ids = {pk for m in milestones for pk in m.evidence or [] if isinstance(pk, int)}
    evidence = Record.objects.filter(mission=mission, pk__in=evidence_ids).in_bulk() if evidence_ids else {}
    for m in milestones:
        m.evidence_records = [evidence[pk] for pk in m.evidence or [] if pk in evidence]
    approved = [m for m in milestones if m.review_status == ReviewStatus.APPROVED]
    operations = sorted((op for group in bundle["operations"].values() for op in group), key=lambda op: op["id"])
    return MissionPage(
        mission=mission,
        bundle=bundle,
        constraints=constraints,
        pending_approvals=[a for a in approvals if a.status == ApprovalStatus.PENDING],
        decided_approvals=[a for a in approvals if a.status != ApprovalStatus.PENDING],
        milestones=milestones,
        runs=runs,
        checkpoints=checkpoints,
        tree=checkpoint_tree(checkpoints, mission.head_checkpoint_id),
        timeline=timeline(runs, checkpoints),
        operations=operations,
        progress=mission.progress_of(milestones),
        badges=approved,
        restore_default=next((c for c in checkpoints if c.pk == mission.last_verified_checkpoint_id), checkpoints[0] if checkpoints else None),
        can={event: machine.can(mission, event) for event in ("pause", "unpause", "cancel", "restore")},
    )


__all__ = [
    "board", "board_missions", "board_version", "checkpoint_tree", "inbox", "mission_page", "mission_version",
    "next_step", "quest_card", "timeline", "token_mission_choices", "token_missions", "tokens",
    "InboxItem", "TOKENS_PAGE_SIZE",
]
