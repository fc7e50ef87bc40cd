"""The checkpoint tree picture of the mission page, at any size: a window of checkpoints around the
chosen one, laid out in lanes, and a constant-size overview of the whole history. Pure layout: the
rows come from `quests.selectors.history`, which reads them in a fixed number of queries."""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from checkpoints.models import Checkpoint

# Checkpoints drawn either side of the chosen one: the picture holds at most 2 * TREE_REACH + 1.
TREE_REACH = 15
TREE_STEP_X = 34
TREE_STEP_Y = 30
TREE_PAD = 18
OVERVIEW_BUCKETS = 50


@dataclass
class TreeNode:
    checkpoint: Checkpoint
    x: int
    y: int
    on_branch: bool
    is_head: bool
    is_chosen: bool = False
    parent: "TreeNode | None" = None
    # The parent lies outside the window: the edge comes in as a stub from the left edge.
    stub: bool = False

    @property
    def css_class(self) -> str:
        verified, aside = self.checkpoint.verified, not self.on_branch
        flags = (("verified", verified), ("abandoned", aside), ("head", self.is_head), ("chosen", self.is_chosen))
        return " ".join(["node", *(name for name, on in flags if on)])

    @property
    def states(self) -> str:
        """What the node's colour says, in words (for its accessible name)."""
        verified, aside = self.checkpoint.verified, not self.on_branch
        flags = (("verified", verified), ("set aside", aside), ("current", self.is_head), ("chosen", self.is_chosen))
        return "".join(f", {name}" for name, on in flags if on)

    @property
    def edge_class(self) -> str:
        return "edge" + (" abandoned" if not self.on_branch else "") + (" stub" if self.stub else "")

    @property
    def edge_path(self) -> str:
        """The SVG path from the parent: straight along a lane, a curve where a branch starts."""
        if self.parent is None:
            return f"M0 {self.y} L{self.x} {self.y}" if self.stub else ""
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
    chosen: TreeNode | None = None
    # The checkpoints just outside the window, which "Earlier" and "Later" centre on.
    earlier: Checkpoint | None = None
    later: Checkpoint | None = None

    @property
    def edges(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.parent is not None or n.stub]

    @property
    def centre_x(self) -> int:
        return self.width // 2


def branch_runs(head_seq: int | None, jumps: dict[int, int | None]) -> list[tuple[int, int]]:
    """The current branch (the head and its ancestors) as seq ranges, newest first.

    A checkpoint's parent is the checkpoint written just before it (pruning re-parents to the
    nearest kept ancestor, which is the same thing), except for a restore, whose parent is the
    checkpoint it restored, and a first checkpoint, which has none: the `jumps` (restore and
    parentless checkpoints, seq -> parent's seq). So from the head the branch runs down every seq
    to the nearest jump, continues from that jump's parent, and so on: as many steps as there are
    restores, never a walk over the checkpoints themselves."""
    runs: list[tuple[int, int]] = []
    starts = sorted(jumps)
    cursor = head_seq
    while cursor is not None and len(runs) <= len(starts):
        index = bisect_right(starts, cursor) - 1
        low = starts[index] if index >= 0 else 0
        runs.append((low, cursor))
        cursor = jumps.get(low) if index >= 0 else None
    return runs


def on_branch(seq: int, runs: list[tuple[int, int]]) -> bool:
    """Whether `seq` lies in one of the ranges (newest first, as `branch_runs` gives them): a binary search."""
    index = bisect_left(runs, -seq, key=lambda run: -run[0])  # the first range starting at or below seq
    return index < len(runs) and runs[index][0] <= seq <= runs[index][1]


def off_branch_ranges(first: int, last: int, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The numbers from `first` to `last` not on the current branch, as ranges oldest first."""
    gaps, cursor = [], first
    for low, high in sorted(runs):
        if low > cursor:
            gaps.append((cursor, min(low - 1, last)))
        cursor = max(cursor, high + 1)
    if cursor <= last:
        gaps.append((cursor, last))
    return [(low, high) for low, high in gaps if low <= high]


def _branch_in_window(window: list[Checkpoint], runs: list[tuple[int, int]]) -> set[int]:
    """The window's checkpoints that are ancestors of the head. The seq ranges only say where the
    branch enters the window; inside it, the real parent links are walked (at most the window)."""
    by_id = {c.pk: c for c in window}
    entry = next((c for c in reversed(window) if on_branch(c.seq, runs)), None)
    found: set[int] = set()
    while entry is not None and entry.pk not in found:
        found.add(entry.pk)
        entry = by_id.get(entry.parent_id) if entry.parent_id else None
    return found


def checkpoint_tree(
    older: list[Checkpoint], chosen: Checkpoint | None, newer: list[Checkpoint], head_id: int | None, runs: list[tuple[int, int]]
) -> CheckpointTree:
    """Lay out the chosen checkpoint with up to TREE_REACH checkpoints either side (`older` newest
    first, `newer` oldest first, each possibly one longer to say there is more), the chosen one in
    the horizontal centre. The current branch runs along the top lane; every branch set aside by a
    restore gets a lane of its own below."""
    if chosen is None:
        return CheckpointTree(nodes=[], width=2 * TREE_PAD, height=2 * TREE_PAD, lanes=1)
    earlier = older[TREE_REACH] if len(older) > TREE_REACH else None
    later = newer[TREE_REACH] if len(newer) > TREE_REACH else None
    older, newer = older[:TREE_REACH], newer[:TREE_REACH]
    window = [*reversed(older), chosen, *newer]
    # Positions count from the chosen one, so a window short on one side leaves empty space there.
    slot = {c.pk: TREE_REACH - len(older) + i for i, c in enumerate(window)}
    by_id = {c.pk: c for c in window}
    branch = _branch_in_window(window, runs)
    children: dict[int | None, list[Checkpoint]] = {}
    for c in window:
        if c.parent_id in by_id:
            children.setdefault(c.parent_id, []).append(c)

    lane_of: dict[int | None, int] = {}  # keyed by pk, read by parent_id (None: a root)
    next_lane = 1
    nodes: dict[int | None, TreeNode] = {}
    for c in window:
        siblings = children.get(c.parent_id, []) if c.parent_id in lane_of else []
        # A set-aside branch continues the lane of its parent when it is the parent's first child
        # off the current branch's lane; the current branch alone has lane 0.
        continues = c.pk not in branch and lane_of.get(c.parent_id) and siblings and siblings[0].pk == c.pk
        if c.pk in branch:
            lane = 0
        elif continues:
            lane = lane_of[c.parent_id]
        else:
            lane, next_lane = next_lane, next_lane + 1
        lane_of[c.pk] = lane
        nodes[c.pk] = TreeNode(
            checkpoint=c,
            x=TREE_PAD + slot[c.pk] * TREE_STEP_X,
            y=TREE_PAD + lane * TREE_STEP_Y,
            on_branch=c.pk in branch,
            is_head=c.pk == head_id,
            is_chosen=c.pk == chosen.pk,
            stub=c.parent_id is not None and c.parent_id not in by_id,
        )
    for node in nodes.values():
        node.parent = nodes.get(node.checkpoint.parent_id)
    lanes = max(lane_of.values()) + 1
    return CheckpointTree(
        nodes=list(nodes.values()),
        width=2 * TREE_PAD + 2 * TREE_REACH * TREE_STEP_X,
        height=2 * TREE_PAD + (lanes - 1) * TREE_STEP_Y,
        lanes=lanes,
        chosen=nodes[chosen.pk],
        earlier=earlier,
        later=later,
    )


@dataclass
class HistoryShape:
    """A whole history as the few checkpoints that shape it say: the current branch as seq ranges,
    the verified checkpoints' numbers (sorted), the first and the last (the head's) numbers."""

    runs: list[tuple[int, int]]
    verified: list[int]
    first: int | None
    last: int | None


@dataclass
class OverviewBucket:
    """A stretch of the history, checkpoints numbered first..last, in the overview strip."""

    first: int
    last: int
    verified: int
    set_aside: bool
    holds_chosen: bool

    @property
    def css_class(self) -> str:
        flags = (("verified", self.verified), ("abandoned", self.set_aside), ("chosen", self.holds_chosen))
        return " ".join(["bucket", *(name for name, on in flags if on)])

    @property
    def label(self) -> str:
        stretch = f"#{self.first}" + (f" to #{self.last}" if self.last != self.first else "")
        return stretch + (f", {self.verified} verified" if self.verified else "") + (", some set aside" if self.set_aside else "")


@dataclass
class Overview:
    buckets: list[OverviewBucket] = field(default_factory=list)
    first: int | None = None
    last: int | None = None


def overview(shape: HistoryShape, chosen_seq: int | None) -> Overview:
    """The whole history in at most OVERVIEW_BUCKETS equal stretches of checkpoint numbers, each
    saying whether it holds verified checkpoints and checkpoints set aside by a restore (numbers
    off the current branch). Computed from the shape alone: no query, whatever the history's length.
    (Pruning may since have removed background snapshots from a set-aside stretch.)"""
    if shape.first is None or shape.last is None or shape.last < shape.first:
        return Overview()
    span = shape.last - shape.first + 1
    count = min(OVERVIEW_BUCKETS, span)
    gaps = off_branch_ranges(shape.first, shape.last, shape.runs)
    gap_ends = [high for _, high in gaps]
    buckets = []
    for index in range(count):
        first = shape.first + index * span // count
        last = shape.first + (index + 1) * span // count - 1
        verified = bisect_right(shape.verified, last) - bisect_left(shape.verified, first)
        # The first stretch off the branch ending at or after `first`: does it start by `last`?
        gap = bisect_left(gap_ends, first)
        buckets.append(
            OverviewBucket(
                first=first,
                last=last,
                verified=verified,
                set_aside=gap < len(gaps) and gaps[gap][0] <= last,
                holds_chosen=chosen_seq is not None and first <= chosen_seq <= last,
            )
        )
    return Overview(buckets=buckets, first=shape.first, last=shape.last)
