"""Read side of the mission page, at any size. The page shows windows of a mission's history, never
all of it: the checkpoint tree around a chosen checkpoint, the newest runs and checkpoints of the
timeline (paged by checkpoint number), the newest decided approvals and reviewed milestones with a
count of the rest (`quests.selectors.reviews`), the ledger's window (`quests.selectors.ledger`) and
an overview of the whole history in a fixed number of buckets; the history's rows are
`quests.selectors.history`'s. Each is a fixed number of queries returning a bounded number of rows,
whatever the number of checkpoints, runs, approvals or milestones."""

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db.models import Exists, OuterRef

from checkpoints.models import Checkpoint, Record
from quests.models import (
    Approval,
    Constraint,
    Milestone,
    Mission,
    MissionQuerySet,
    MissionStatus,
    StandingDecision,
)
from quests.selectors.history import HistoryWindow, TimelinePage, history_shape, page_rows, timeline_page, tree_window
from quests.selectors.ledger import LedgerWindow, ledger_window
from quests.selectors.reviews import approvals, milestone_window
from quests.selectors.tree import CheckpointTree, Overview, overview
from quests.services import machine
from quests.services.bundle import pending_annotations, resume_summary


@dataclass
class MissionPage:
    mission: Mission
    window: HistoryWindow
    summary: dict[str, Any]
    constraints: list[Constraint]
    pending_approvals: list[Approval]
    decided_approvals: list[Approval]
    # The person's standing decisions ("always approve send_email here"), newest first.
    standing_decisions: list[StandingDecision]
    decided_total: int
    milestones: list[Milestone]
    reviewed_total: int
    tree: CheckpointTree
    tree_checkpoints: list[Checkpoint]
    overview: Overview
    timeline: TimelinePage
    ledger: LedgerWindow
    progress: dict[str, int]
    badges: list[Milestone]
    restore_choices: list[Checkpoint]
    restore_default: Checkpoint | None
    can: dict[str, bool]

    @property
    def running(self) -> bool:
        return self.mission.status == MissionStatus.RUNNING

    @property
    def gates_waiting(self) -> list[Milestone]:
        """The gate milestones the mission waits on (they are listed with their review forms)."""
        return [m for m in self.milestones if m.gate and m.is_awaiting_review and not m.withdrawn]

    @property
    def status_label(self) -> str:
        return machine.status_label(self.mission.status, waits_for_review=not self.pending_approvals and bool(self.gates_waiting))

    @property
    def has_checkpoints(self) -> bool:
        return self.tree.chosen is not None

    @property
    def decided_hidden(self) -> int:
        return self.decided_total - len(self.decided_approvals)

    @property
    def has_decisions(self) -> bool:
        """Whether any approval of the quest was decided or any milestone reviewed (or set aside)."""
        return self.decided_total > 0 or self.reviewed_total > 0

    @property
    def reviewed_shown(self) -> int:
        return sum(not m.is_awaiting_review for m in self.milestones)

    @property
    def reviewed_hidden(self) -> int:
        return self.reviewed_total - self.reviewed_shown

    @property
    def badges_hidden(self) -> int:
        return self.progress["approved"] - len(self.badges)

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
        return [(key, label, self.summary[key]) for key, label in sections]


def presence_annotations() -> dict[str, Any]:
    """Whether the mission has any constraint, standing decision or milestone, as annotations of
    the page's read of its mission (an index lookup each): `mission_page` skips the query for a
    list the mission does not have, as most quests have none of some of them. Under load every
    statement a page sends waits its turn for a CPU twice (the database's, then the answer's), so a
    page of fewer statements is faster there than its CPU time alone says."""
    return {
        "has_constraints": Exists(Constraint.objects.filter(mission=OuterRef("pk"))),
        "has_standing_decisions": Exists(StandingDecision.objects.filter(mission=OuterRef("pk"))),
        "has_milestones": Exists(Milestone.objects.filter(mission=OuterRef("pk"))),
    }


@cache
def mission_page_read() -> MissionQuerySet:
    """The missions as the mission page reads its own: with what it waits for (the bundle's
    `pending_annotations`) and which of its lists it has (`presence_annotations`). Built once per
    process, for every view of the page: building and resolving its seven subqueries took ~1.1 ms of
    the page's CPU each time (a queryset is never changed by what is applied to it: each filter
    makes a copy)."""
    return Mission.objects.annotate(**pending_annotations(), **presence_annotations())


def _has(mission: Mission, what: str) -> bool:
    """Whether the mission has any `what`, when read with presence_annotations (else it may)."""
    return getattr(mission, f"has_{what}", True)


def mission_page(mission: Mission, window: HistoryWindow | None = None, waits_for: machine.Pending | None = None) -> MissionPage:
    """Everything the mission page shows. The sentence, the next action and the live records are the
    resume bundle's (`resume_summary`: its rules, without reading what it carries whole), so the
    page says exactly what the next run is told; the ledger and the milestones are windows of their
    own: what needs someone and the newest of the rest. `waits_for`: the mission's Pending, if read
    with it (`bundle.pending_annotations`)."""
    window = window or HistoryWindow()
    summary = resume_summary(mission, waits_for)
    constraints = list(Constraint.objects.filter(mission=mission).select_related("replaces").order_by("id")) if _has(mission, "constraints") else []
    pending, decided, decided_total = approvals(mission)
    claimed = milestone_window(mission, any_claimed=_has(mission, "milestones"))
    milestones: list[Any] = claimed.listed  # each is given its evidence_records below
    evidence_ids = {pk for m in milestones for pk in m.evidence or [] if isinstance(pk, int)}
    evidence = Record.objects.filter(mission=mission, pk__in=evidence_ids).in_bulk() if evidence_ids else {}
    for m in milestones:
        m.evidence_records = [evidence[pk] for pk in m.evidence or [] if pk in evidence]
    shape = history_shape(mission)
    rows = page_rows(mission, window)
    tree, shown = tree_window(mission, rows, shape.runs)
    last_verified = rows.last_verified
    choices = [*shown, *([last_verified] if last_verified and last_verified not in shown else [])]
    asked = tree.chosen is not None and (window.at == tree.chosen.checkpoint.pk or window.near is not None)
    explicit = tree.chosen.checkpoint if asked and tree.chosen is not None else None
    return MissionPage(
        mission=mission,
        window=window,
        summary=summary,
        constraints=constraints,
        pending_approvals=pending,
        decided_approvals=decided,
        standing_decisions=list(mission.standing_decisions.order_by("-id")) if _has(mission, "standing_decisions") else [],
        decided_total=decided_total,
        milestones=milestones,
        reviewed_total=claimed.reviewed_total,
        tree=tree,
        tree_checkpoints=shown,
        overview=overview(shape, tree.chosen.checkpoint.seq if tree.chosen else None),
        timeline=timeline_page(mission, window, rows),
        ledger=ledger_window(mission),
        progress=claimed.progress,
        badges=claimed.badges,
        restore_choices=choices,
        restore_default=explicit or last_verified or (tree.chosen.checkpoint if tree.chosen else None),
        can={event: machine.can(mission, event) for event in ("pause", "unpause", "cancel", "restore")},
    )
