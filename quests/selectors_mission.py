"""Read side of the mission page, at any size. The page shows windows of a mission's history, never
all of it: the checkpoint tree around a chosen checkpoint, the newest runs and checkpoints of the
timeline (paged by checkpoint number), the newest decided approvals with a count of the rest, and
an overview of the whole history in a fixed number of buckets. Each is a fixed number of queries
returning a bounded number of rows, whatever the number of checkpoints or runs."""

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, OuterRef, Q, Subquery, Value, Window
from django.db.models.functions import Coalesce

from checkpoints.models import BRANCH_POINTS, Checkpoint, Record, Trigger
from quests.checkpoint_tree import TREE_REACH, CheckpointTree, HistoryShape, Overview, branch_runs, checkpoint_tree, overview
from quests.models import Approval, ApprovalStatus, Constraint, Milestone, Mission, MissionStatus, ReviewStatus, Run
from quests.services import machine
from quests.services.bundle import resume_bundle

# Fields a checkpoint list needs; the state references stay unread until a checkpoint page opens.
HEAVY_CHECKPOINT_FIELDS = ("checkpoint__state_refs", "checkpoint__agent_state_refs", "checkpoint__compaction_report")
CHECKPOINT_LIST_FIELDS = ("id", "mission_id", "run_id", "parent_id", "seq", "trigger", "verified", "note", "created_at", "hash", "size_bytes")
TIMELINE_SIZE = 20
DECIDED_SHOWN = 10
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
class TimelinePage:
    entries: list[TimelineEntry]
    # The `before` of the next older page, and of the next newer one (None: the newest page).
    older: int | None
    newer: int | None
    is_latest: bool


def timeline_page(mission: Mission, before: int | None) -> TimelinePage:
    """The newest TIMELINE_SIZE checkpoints numbered below `before` with the runs that wrote them,
    and the runs without checkpoints started in that stretch of time (2 or 3 queries)."""
    mine = Checkpoint.objects.filter(mission_id=mission.pk)
    rows = list(mine.filter(seq__lt=before or NO_BOUND).only(*CHECKPOINT_LIST_FIELDS).order_by("-seq")[: TIMELINE_SIZE + 1])
    has_older = len(rows) > TIMELINE_SIZE
    rows = rows[:TIMELINE_SIZE]
    started_here = Q()
    if has_older:
        started_here &= Q(started_at__gte=rows[-1].created_at)
    if before is not None:
        started_here &= Q(started_at__lt=Subquery(mine.filter(seq=before).values("created_at")[:1]))
    run_ids = {c.run_id for c in rows if c.run_id}
    runs = list(Run.objects.filter(Q(pk__in=run_ids) | started_here, mission_id=mission.pk).order_by("-number")[:TIMELINE_SIZE])
    newer = None
    if before is not None:
        # The newer page ends just below the checkpoint TIMELINE_SIZE places up; none: the newest page.
        bound = mine.filter(seq__gte=before).order_by("seq").values_list("seq", flat=True)[TIMELINE_SIZE:TIMELINE_SIZE + 1]
        newer = next(iter(bound), None)
    return TimelinePage(
        entries=timeline(runs, rows), older=rows[-1].seq if has_older else None, newer=newer, is_latest=before is None,
    )


def _tree_rows(mission: Mission, window: HistoryWindow) -> tuple[list[Checkpoint], Checkpoint | None, Checkpoint | None]:
    """One query: the chosen checkpoint (`at` if it is this mission's, else the first numbered from
    `near`, else the head), TREE_REACH + 1 checkpoints either side of it, and the last verified one
    (for the restore picker)."""
    mine = Checkpoint.objects.filter(mission_id=mission.pk)
    candidates = [mine.filter(pk=window.at)] if window.at else []
    candidates += [mine.filter(seq__gte=window.near).order_by("seq")] if window.near is not None else []
    candidates += [mine.filter(pk=mission.head_checkpoint_id)]
    chosen_seq = Coalesce(*(Subquery(c.values("seq")[:1]) for c in candidates), Value(None))
    low = Coalesce(Subquery(mine.filter(seq__lt=chosen_seq).order_by("-seq").values("seq")[TREE_REACH:TREE_REACH + 1]), Value(0))
    high = Coalesce(Subquery(mine.filter(seq__gt=chosen_seq).order_by("seq").values("seq")[TREE_REACH:TREE_REACH + 1]), Value(NO_BOUND))
    wanted = Q(seq__gte=low, seq__lte=high) | Q(pk=mission.last_verified_checkpoint_id)
    rows = list(mine.filter(wanted).annotate(chosen_seq=chosen_seq).only(*CHECKPOINT_LIST_FIELDS).order_by("seq"))
    chosen = next((c for c in rows if c.seq == c.chosen_seq), None)
    last_verified = next((c for c in rows if c.pk == mission.last_verified_checkpoint_id), None)
    return rows, chosen, last_verified


def history_shape(mission: Mission) -> HistoryShape:
    """What the whole history looks like, from the few checkpoints that shape it (restores, first
    ones, verified ones; one query along their partial index): one row per restore or verified
    checkpoint a person made, not per checkpoint."""
    rows = Checkpoint.objects.filter(BRANCH_POINTS, mission_id=mission.pk).annotate(
        # A lookup per row found, not a join over every checkpoint.
        parent_seq=Subquery(Checkpoint.objects.filter(pk=OuterRef("parent_id")).values("seq")[:1]),
        head_seq=Subquery(Checkpoint.objects.filter(pk=mission.head_checkpoint_id).values("seq")[:1]),
    ).values_list("seq", "trigger", "parent_id", "parent_seq", "verified", "head_seq")
    head_seq, first_seq, jumps, verified = None, None, {}, []
    for seq, trigger, parent_id, parent_seq, is_verified, head_seq in rows:
        first_seq = seq if first_seq is None else min(first_seq, seq)
        if trigger == Trigger.RESTORE or parent_id is None:
            jumps[seq] = parent_seq
        if is_verified:
            verified.append(seq)
    return HistoryShape(runs=branch_runs(head_seq, jumps), verified=sorted(verified), first=first_seq, last=head_seq)


def tree_window(mission: Mission, window: HistoryWindow, runs: list[tuple[int, int]]) -> tuple[CheckpointTree, list[Checkpoint], Checkpoint | None]:
    """The tree around the chosen checkpoint, its checkpoints newest first and the last verified one."""
    rows, chosen, last_verified = _tree_rows(mission, window)
    if chosen is None:
        return checkpoint_tree([], None, [], None, runs), [], last_verified
    older = [c for c in reversed(rows) if c.seq < chosen.seq]
    newer = [c for c in rows if c.seq > chosen.seq]
    if last_verified is not None and last_verified.seq < chosen.seq and last_verified not in older[: TREE_REACH + 1]:
        older.remove(last_verified)
    if last_verified is not None and last_verified.seq > chosen.seq and last_verified not in newer[: TREE_REACH + 1]:
        newer.remove(last_verified)
    tree = checkpoint_tree(older, chosen, newer, mission.head_checkpoint_id, runs)
    shown = sorted((n.checkpoint for n in tree.nodes), key=lambda c: c.seq, reverse=True)
    return tree, shown, last_verified


def decided_approvals(mission: Mission) -> tuple[list[Approval], int]:
    """The newest DECIDED_SHOWN decided approvals and how many there are in all (one query)."""
    rows = list(
        Approval.objects.filter(mission=mission).exclude(status=ApprovalStatus.PENDING)
        .annotate(total=Window(Count("id"))).order_by("-id")[:DECIDED_SHOWN]
    )
    return rows, (rows[0].total if rows else 0)


@dataclass
class MissionPage:
    mission: Mission
    window: HistoryWindow
    bundle: dict[str, Any]
    constraints: list[Constraint]
    pending_approvals: list[Approval]
    decided_approvals: list[Approval]
    decided_total: int
    milestones: list[Milestone]
    tree: CheckpointTree
    tree_checkpoints: list[Checkpoint]
    overview: Overview
    timeline: TimelinePage
    operations: list[dict[str, Any]]
    progress: dict[str, int]
    badges: list[Milestone]
    restore_choices: list[Checkpoint]
    restore_default: Checkpoint | None
    can: dict[str, bool]

    @property
    def running(self) -> bool:
        return self.mission.status == MissionStatus.RUNNING

    @property
    def has_checkpoints(self) -> bool:
        return self.tree.chosen is not None

    @property
    def decided_hidden(self) -> int:
        return self.decided_total - len(self.decided_approvals)

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


def mission_page(mission: Mission, window: HistoryWindow | None = None) -> MissionPage:
    """Everything the mission page shows. The sentence, the next action, the live records and the
    ledger come from the resume bundle, so the page says exactly what the next run is told."""
    window = window or HistoryWindow()
    bundle = resume_bundle(mission)
    constraints = list(Constraint.objects.filter(mission=mission).select_related("replaces").order_by("id"))
    pending = list(Approval.objects.filter(mission=mission, status=ApprovalStatus.PENDING).order_by("id"))
    decided, decided_total = decided_approvals(mission)
    milestones = list(
        Milestone.objects.filter(mission=mission).select_related("checkpoint").defer(*HEAVY_CHECKPOINT_FIELDS).order_by("id")
    )
    evidence_ids = {pk for m in milestones for pk in m.evidence or [] if isinstance(pk, int)}
    evidence = Record.objects.filter(mission=mission, pk__in=evidence_ids).in_bulk() if evidence_ids else {}
    for m in milestones:
        m.evidence_records = [evidence[pk] for pk in m.evidence or [] if pk in evidence]
    approved = [m for m in milestones if m.review_status == ReviewStatus.APPROVED]
    operations = sorted((op for group in bundle["operations"].values() for op in group), key=lambda op: op["id"])
    shape = history_shape(mission)
    tree, shown, last_verified = tree_window(mission, window, shape.runs)
    choices = [*shown, *([last_verified] if last_verified and last_verified not in shown else [])]
    asked = tree.chosen is not None and (window.at == tree.chosen.checkpoint.pk or window.near is not None)
    explicit = tree.chosen.checkpoint if asked else None
    return MissionPage(
        mission=mission,
        window=window,
        bundle=bundle,
        constraints=constraints,
        pending_approvals=pending,
        decided_approvals=decided,
        decided_total=decided_total,
        milestones=milestones,
        tree=tree,
        tree_checkpoints=shown,
        overview=overview(shape, tree.chosen.checkpoint.seq if tree.chosen else None),
        timeline=timeline_page(mission, window.before),
        operations=operations,
        progress=mission.progress_of(milestones),
        badges=approved,
        restore_choices=choices,
        restore_default=explicit or last_verified or (tree.chosen.checkpoint if tree.chosen else None),
        can={event: machine.can(mission, event) for event in ("pause", "unpause", "cancel", "restore")},
    )


# ---- checkpoint page --------------------------------------------------------------------------

@dataclass
class CompareChoices:
    """The checkpoints a checkpoint page offers to compare with, and the one asked for by number."""

    quick: list[tuple[str, Checkpoint]]
    by_id: dict[int, Checkpoint]
    asked: Checkpoint | None


def compare_choices(checkpoint: Checkpoint, mission: Mission, *, against_id: int | None, seq: int | None) -> CompareChoices:
    """One query, a handful of rows: the parent, the previous and the next checkpoint by number, the
    last verified one, the current head, the one asked for by id and the one asked for by number."""
    mine = Checkpoint.objects.filter(mission_id=mission.pk)
    previous = Subquery(mine.filter(seq__lt=checkpoint.seq).order_by("-seq").values("seq")[:1])
    following = Subquery(mine.filter(seq__gt=checkpoint.seq).order_by("seq").values("seq")[:1])
    ids = {pk for pk in (checkpoint.parent_id, mission.last_verified_checkpoint_id, mission.head_checkpoint_id, against_id) if pk}
    wanted = Q(pk__in=ids) | Q(seq=previous) | Q(seq=following) | Q(seq=seq if seq is not None else -1)
    rows = list(mine.filter(wanted).only(*CHECKPOINT_LIST_FIELDS).order_by("seq"))
    by_seq = {c.seq: c for c in rows}
    by_id = {c.pk: c for c in rows}
    before = [c for c in rows if c.seq < checkpoint.seq]
    after = [c for c in rows if c.seq > checkpoint.seq]
    labelled = [
        ("the parent", by_id.get(checkpoint.parent_id)),
        ("the previous one", before[-1] if before else None),
        ("the next one", after[0] if after else None),
        ("the last verified", by_id.get(mission.last_verified_checkpoint_id)),
        ("the current one", by_id.get(mission.head_checkpoint_id)),
    ]
    quick: list[tuple[str, Checkpoint]] = []
    for label, c in labelled:
        if c is not None and c.pk != checkpoint.pk and all(c.pk != shown.pk for _, shown in quick):
            quick.append((label, c))
    return CompareChoices(quick=quick, by_id=by_id, asked=by_seq.get(seq) if seq is not None else None)
