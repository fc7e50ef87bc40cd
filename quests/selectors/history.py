"""Read side of a mission's history on its page, at any size: the checkpoint rows the page draws
(the tree around a chosen checkpoint, the timeline's page, the last verified one) in one query, the
timeline's runs and a person's acts, and the history's shape (its restores and verified
checkpoints). Each is a fixed number of queries returning a bounded number of rows, whatever the
number of checkpoints or runs (`quests.selectors.mission` assembles the page)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce

from checkpoints.models import BRANCH_POINTS, Checkpoint, Trigger
from quests.models import AuditEvent, Mission, Run
from quests.selectors.tree import TREE_REACH, CheckpointTree, HistoryShape, branch_runs, checkpoint_tree

CHECKPOINT_LIST_FIELDS = ("id", "mission_id", "run_id", "parent_id", "seq", "trigger", "verified", "note", "created_at", "hash", "size_bytes")
TIMELINE_SIZE = 20
# Larger than any checkpoint number or id: an upper bound that lets every row through.
NO_BOUND = 2**31 - 1


@dataclass
class HistoryWindow:
    """What the URL asks the mission page to show: the checkpoint centred in the tree (`at`, an id,
    or else `near`, the first checkpoint numbered from there, as the overview strip links) and the
    timeline page (`before`, a checkpoint number). None is the default: the head, the newest."""

    at: int | None = None
    before: int | None = None
    near: int | None = None

    def query(self, **changes: Any) -> dict[str, int]:
        """The URL query of this window with some of it changed (None drops a key)."""
        state = {"at": self.at, "near": self.near, "before": self.before, **changes}
        return {key: value for key, value in state.items() if value is not None}


@dataclass
class TimelineEntry:
    """One run with the checkpoints it wrote, a checkpoint no run wrote (a restore, a pause), or a
    person's decision or review (`act`, its audit event)."""

    at: Any
    run: Run | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    act: AuditEvent | None = None

    @property
    def foreground(self) -> list[Checkpoint]:
        return [c for c in self.checkpoints if c.trigger != Trigger.BACKGROUND]

    @property
    def background(self) -> list[Checkpoint]:
        """Snapshots the system took on its own: many, and rarely what a person looks for."""
        return [c for c in self.checkpoints if c.trigger == Trigger.BACKGROUND]


def timeline(runs: list[Run], checkpoints: list[Checkpoint], acts: Sequence[AuditEvent] = ()) -> list[TimelineEntry]:
    by_run: dict[int, TimelineEntry] = {r.pk: TimelineEntry(at=r.started_at, run=r) for r in runs}
    loose: list[TimelineEntry] = []
    for c in sorted(checkpoints, key=lambda c: c.seq):
        if c.run_id in by_run:
            by_run[c.run_id].checkpoints.append(c)
        else:
            loose.append(TimelineEntry(at=c.created_at, checkpoints=[c]))
    loose += [TimelineEntry(at=act.created_at, act=act) for act in acts]
    return sorted([*by_run.values(), *loose], key=lambda e: e.at, reverse=True)


# The acts of a person the timeline shows: decisions on approvals (and their undoing) and reviews.
PERSON_ACTS = Q(entity="approval", action__in=("approve", "edit", "reject", "undo")) | Q(entity="milestone", action__in=("approve", "correct"))


@dataclass
class TimelinePage:
    entries: list[TimelineEntry]
    # The `before` of the next older page, and of the next newer one (None: the newest page).
    older: int | None
    newer: int | None
    is_latest: bool


@dataclass
class PageRows:
    """The checkpoint rows the page draws: the tree's window (oldest first) with its chosen one and
    the last verified one, the timeline's page (newest first, one more to say there is more) and
    where the newer timeline page ends (None: the newest page)."""

    tree: list[Checkpoint]
    chosen: Checkpoint | None
    last_verified: Checkpoint | None
    timeline: list[Checkpoint]
    newer: int | None


def page_rows(mission: Mission, window: HistoryWindow) -> PageRows:
    """One query for every checkpoint row the page draws (`_head_rows` for the page as it opens,
    else `_windowed_rows`)."""
    if window == HistoryWindow():
        head = _head_rows(mission)
        if head is not None:
            return head
    return _windowed_rows(mission, window)


def _head_rows(mission: Mission) -> PageRows | None:
    """The rows of the page as it opens (the head in the tree, the newest timeline page) read as
    the newest TIMELINE_SIZE + 1 checkpoints and the last verified one: a range of the (mission,
    seq) index with one bound to compute, where `_windowed_rows` computes five (and compiling them
    was most of its time). They hold both windows when the head is among them with TREE_REACH + 1
    older ones below it, or the history is no longer: the head is the newest checkpoint but for a
    few moments of a restore. Else None: `_windowed_rows` reads them."""
    if mission.head_checkpoint_id is None:
        return None
    mine = Checkpoint.objects.filter(mission_id=mission.pk)
    newest_bound = Coalesce(Subquery(mine.order_by("-seq").values("seq")[TIMELINE_SIZE : TIMELINE_SIZE + 1]), Value(0))
    found = list(mine.filter(Q(seq__gte=newest_bound) | Q(pk=mission.last_verified_checkpoint_id)).only(*CHECKPOINT_LIST_FIELDS).order_by("-seq"))
    # The last verified checkpoint, when older than the newest, is the one row past them.
    newest = found[: TIMELINE_SIZE + 1]
    head_at = next((i for i, c in enumerate(newest) if c.pk == mission.head_checkpoint_id), None)
    whole = len(newest) <= TIMELINE_SIZE
    if head_at is None or not (whole or head_at + TREE_REACH + 1 < len(newest)):
        return None
    older, newer = newest[head_at + 1 : head_at + TREE_REACH + 2], newest[max(0, head_at - TREE_REACH - 1) : head_at]
    last_verified = next((c for c in found if c.pk == mission.last_verified_checkpoint_id), None)
    tree = sorted({*older, newest[head_at], *newer, *([last_verified] if last_verified else [])}, key=lambda c: c.seq)
    return PageRows(tree=tree, chosen=newest[head_at], last_verified=last_verified, timeline=newest, newer=None)


def _windowed_rows(mission: Mission, window: HistoryWindow) -> PageRows:
    """One query for every checkpoint row the page draws: the chosen checkpoint (`at` if it is this
    mission's, else the first numbered from `near`, else the head) with TREE_REACH + 1 checkpoints
    either side, the last verified one (for the restore picker) and the newest TIMELINE_SIZE + 1
    numbered below `before`. The windows' bounds are computed by the database along the (mission,
    seq) index and come back with every row, so they are split here without another query."""
    mine = Checkpoint.objects.filter(mission_id=mission.pk)

    def seq_at(rows: Any, offset: int) -> Subquery:
        return Subquery(rows.values("seq")[offset : offset + 1])

    candidates = [mine.filter(pk=window.at)] if window.at else []
    candidates += [mine.filter(seq__gte=window.near).order_by("seq")] if window.near is not None else []
    candidates += [mine.filter(Q(pk=mission.head_checkpoint_id))]  # None: no row (the stubs want a value)
    chosen_seq = Coalesce(*(seq_at(c, 0) for c in candidates), Value(None))
    before = window.before if window.before is not None else NO_BOUND
    bounds = {
        "chosen_seq": chosen_seq,
        "tree_low": Coalesce(seq_at(mine.filter(seq__lt=chosen_seq).order_by("-seq"), TREE_REACH), Value(0)),
        "tree_high": Coalesce(seq_at(mine.filter(seq__gt=chosen_seq).order_by("seq"), TREE_REACH), Value(NO_BOUND)),
        "timeline_low": Coalesce(seq_at(mine.filter(seq__lt=before).order_by("-seq"), TIMELINE_SIZE), Value(0)),
        # The newer timeline page ends just below the checkpoint TIMELINE_SIZE places up from `before`.
        "newer_bound": seq_at(mine.filter(seq__gte=before).order_by("seq"), TIMELINE_SIZE),
    }
    wanted = (
        Q(seq__gte=bounds["tree_low"], seq__lte=bounds["tree_high"])
        | Q(pk=mission.last_verified_checkpoint_id)
        | Q(seq__gte=bounds["timeline_low"], seq__lt=before)
    )
    # Annotated by a dict of expressions, which the stubs cannot follow: the rows carry the bounds as attributes.
    rows: list[Any] = list(mine.filter(wanted).annotate(**bounds).only(*CHECKPOINT_LIST_FIELDS).order_by("seq"))
    last_verified = next((c for c in rows if c.pk == mission.last_verified_checkpoint_id), None)
    tree = [c for c in rows if c.tree_low <= c.seq <= c.tree_high or c == last_verified]
    return PageRows(
        tree=tree,
        chosen=next((c for c in rows if c.seq == c.chosen_seq), None),
        last_verified=last_verified,
        timeline=[c for c in reversed(rows) if c.timeline_low <= c.seq < before],
        newer=rows[0].newer_bound if rows and window.before is not None else None,
    )


def timeline_page(mission: Mission, window: HistoryWindow, rows: PageRows) -> TimelinePage:
    """The timeline's page of checkpoints with the runs that wrote them, and the runs without
    checkpoints started in that stretch of time (one query)."""
    has_older = len(rows.timeline) > TIMELINE_SIZE
    shown = rows.timeline[:TIMELINE_SIZE]
    # The page's stretch of time: runs started in it, and a person's decisions and reviews made in it.
    started_here, made_here = Q(), Q()
    if has_older:
        started_here &= Q(started_at__gte=shown[-1].created_at)
        made_here &= Q(created_at__gte=shown[-1].created_at)
    if window.before is not None:
        newer_start = Checkpoint.objects.filter(mission_id=mission.pk, seq=window.before).values("created_at")[:1]
        started_here &= Q(started_at__lt=Subquery(newer_start))
        made_here &= Q(created_at__lt=Subquery(newer_start))
    run_ids = {c.run_id for c in shown if c.run_id}
    runs = list(Run.objects.filter(Q(pk__in=run_ids) | started_here, mission_id=mission.pk).order_by("-number")[:TIMELINE_SIZE])
    acts = list(
        AuditEvent.objects.filter(PERSON_ACTS, made_here, mission_id=mission.pk, actor_user__isnull=False)
        .select_related("actor_user")
        .order_by("-created_at")[:TIMELINE_SIZE]
    )
    return TimelinePage(
        entries=timeline(runs, shown, acts),
        older=shown[-1].seq if has_older else None,
        newer=rows.newer,
        is_latest=window.before is None,
    )


def history_shape(mission: Mission) -> HistoryShape:
    """What the whole history looks like, from the few checkpoints that shape it (restores, first
    ones, verified ones; one query along their partial index): one row per restore or verified
    checkpoint a person made, not per checkpoint."""
    restored = Subquery(Checkpoint.objects.filter(pk=OuterRef("parent_id")).values("seq")[:1])
    rows = list(
        Checkpoint.objects.filter(BRANCH_POINTS, mission_id=mission.pk)
        .annotate(
            # Only a restore's parent matters (a lookup per restore, not a join over every checkpoint).
            parent_seq=Case(When(trigger=Trigger.RESTORE, then=restored)),
            head_seq=Subquery(Checkpoint.objects.filter(Q(pk=mission.head_checkpoint_id)).values("seq")[:1]),
        )
        .values_list("seq", "trigger", "parent_id", "parent_seq", "verified", "head_seq")
        .order_by("seq")
    )
    if not rows:
        return HistoryShape(runs=[], verified=[], first=None, last=None)
    jumps = {seq: parent_seq for seq, trigger, parent_id, parent_seq, _, _ in rows if trigger == Trigger.RESTORE or parent_id is None}
    verified = [seq for seq, *_, is_verified, _ in rows if is_verified]
    head_seq = rows[0][-1]
    return HistoryShape(runs=branch_runs(head_seq, jumps), verified=verified, first=rows[0][0], last=head_seq)


def tree_window(mission: Mission, page: PageRows, runs: list[tuple[int, int]]) -> tuple[CheckpointTree, list[Checkpoint]]:
    """The tree around the chosen checkpoint, and its checkpoints newest first."""
    rows, chosen, last_verified = page.tree, page.chosen, page.last_verified
    if chosen is None:
        return checkpoint_tree([], None, [], None, runs), []
    older = [c for c in reversed(rows) if c.seq < chosen.seq]
    newer = [c for c in rows if c.seq > chosen.seq]
    if last_verified is not None and last_verified.seq < chosen.seq and last_verified not in older[: TREE_REACH + 1]:
        older.remove(last_verified)
    if last_verified is not None and last_verified.seq > chosen.seq and last_verified not in newer[: TREE_REACH + 1]:
        newer.remove(last_verified)
    tree = checkpoint_tree(older, chosen, newer, mission.head_checkpoint_id, runs)
    shown = sorted((n.checkpoint for n in tree.nodes), key=lambda c: c.seq, reverse=True)
    return tree, shown
