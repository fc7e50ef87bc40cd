"""A mission, its runs and its constraints: what a person asks for and what works on it. Rules that
change rows live in `quests.services`; models hold single-row rules and derived values only."""

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from checkpoints.models import Lifecycle
from quests.models.waiting import Milestone, ReviewStatus


class MissionStatus(models.TextChoices):
    READY = "ready"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    BLOCKED = "blocked"
    FAILED = "failed"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class StopReason(models.TextChoices):
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    BLOCKED_EXTERNAL = "blocked_external"
    FAILED_RETRY_BUDGET = "failed_retry_budget"
    PAUSED_BY_USER = "paused_by_user"
    CANCELLED_BY_USER = "cancelled_by_user"
    # An agent deleted the LangGraph thread that made the mission: the agent's act, not the person's.
    THREAD_DELETED = "thread_deleted"
    INTERRUPTED = "interrupted"
    COMPLETED = "completed"


TERMINAL_STATUSES = (MissionStatus.CANCELLED, MissionStatus.COMPLETED)


class MissionQuerySet(models.QuerySet):
    def with_progress(self) -> "MissionQuerySet":
        """Missions with what `Mission.progress` reads prefetched: a list costs two queries."""
        return self.prefetch_related(models.Prefetch("milestones", queryset=Milestone.objects.only("id", "mission_id", "kind", "review_status")))


class Mission(Lifecycle):
    # Not a field: set on a locked row by `services.locking` when its transaction also holds the
    # blob writers' lock, so a later write in it need not take the lock again.
    blobs_guarded: bool = False
    # Not a field either: the run's lock that read this row (`engine.writes.Locked`), whose read of
    # the head's agent state a system checkpoint of the same transaction carries over without reading
    # the head again (`Locked.head_agent`: while the head is still that one). Typed Any: the engine
    # reads missions, so naming its class here would be an import cycle (tests/test_architecture.py).
    locked_by: Any = None

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="missions")
    title = models.CharField(max_length=200)
    objective = models.TextField()
    status = models.CharField(max_length=32, choices=MissionStatus.choices, default=MissionStatus.READY)
    stop_reason = models.CharField(max_length=32, choices=StopReason.choices, null=True, blank=True)  # noqa: DJ001 -- NULL: not stopped (the API says null)
    stop_detail = models.TextField(blank=True, default="")
    retry_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    planned_milestones = models.JSONField(default=list, blank=True)
    head_checkpoint = models.ForeignKey("quests.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_verified_checkpoint = models.ForeignKey("quests.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Allocated under the mission's row lock so checkpoint sequence numbers never collide.
    next_checkpoint_seq = models.PositiveIntegerField(default=1)
    run_count = models.PositiveIntegerField(default=0)
    # Bumped by every change to save state; live pages poll it to know when to redraw.
    state_version = models.PositiveBigIntegerField(default=0)
    # The run allowed to write (the fencing token's holder): set when a run starts and cleared when
    # it ends, both under this row's lock, so a write holding the lock knows at once whether its run
    # is still the one without reading the run again.
    active_run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The save state as it is now, kept up to date section by section by the services that change
    # it (quests.services.savestate), so a checkpoint copies it instead of rebuilding it: the ref of
    # every section, the canonical JSON of the sections changed since the last checkpoint (the next
    # checkpoint stores them as blobs) and the counters the compaction report is made of.
    state_refs = models.JSONField(default=dict, blank=True)
    state_pending = models.JSONField(default=dict, blank=True)
    state_report = models.JSONField(default=dict, blank=True)
    # When a worker last claimed a background snapshot of this mission: the debounce counts from it.
    snapshot_claimed_at = models.DateTimeField(null=True, blank=True)
    purged_at = models.DateTimeField(null=True, blank=True)

    objects = MissionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="mission_owner_newest"),
            # The board: a page of a person's quests, newest activity first, read in order.
            models.Index(fields=["owner", "-updated_at", "-id"], name="mission_owner_active"),
            # The board's counts per status and its poll's version, from the index alone (PostgreSQL).
            models.Index(fields=["owner", "status"], include=["updated_at"], name="mission_owner_status"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def progress(self) -> dict[str, int]:
        """Reads the milestones prefetched by `Mission.objects.with_progress()` when there are,
        else counts them in the database."""
        if "milestones" in getattr(self, "_prefetched_objects_cache", {}):
            return self.progress_of(self.milestones.all())
        return self.progress_of_counts(self.milestones.kind_status_counts().items())

    def progress_of(self, milestones) -> dict[str, int]:
        """`progress_of_counts` for callers that already hold the mission's milestones (rows with
        their kind and review status)."""
        return self.progress_of_counts(((m.kind, m.review_status), 1) for m in milestones)

    def progress_of_counts(self, counts: Iterable[tuple[tuple[str, str], int]]) -> dict[str, int]:
        """The progress rule. `approved` counts approved milestones; `planned` counts the planned
        milestones plus each claimed milestone whose kind matches no planned entry (so duplicates
        cannot inflate it). `counts`: how many milestones of each (kind, review status), as
        `Milestone.objects.kind_status_counts()` reads them (a page need not load every row)."""
        planned = self.planned_milestones or []
        planned_kinds = {m.get("kind") for m in planned}
        approved = extra = 0
        for (kind, review_status), n in counts:
            approved += n * (review_status == ReviewStatus.APPROVED)
            extra += n * (kind not in planned_kinds)
        return {"approved": approved, "planned": len(planned) + extra}


class Run(models.Model):
    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField()
    agent = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=32, choices=StopReason.choices, null=True, blank=True)  # noqa: DJ001 -- NULL: not stopped (the API says null)
    stop_detail = models.TextField(blank=True, default="")
    token = models.ForeignKey("AgentToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["number"]
        constraints = [
            # The database itself guarantees at most one active run per mission.
            models.UniqueConstraint(fields=["mission"], condition=Q(ended_at__isnull=True), name="one_active_run_per_mission"),
            models.UniqueConstraint(fields=["mission", "number"], name="run_number_unique_per_mission"),
        ]

    def __str__(self) -> str:
        return f"run {self.number} of {self.mission_id}"

    @property
    def is_active(self) -> bool:
        return self.ended_at is None

    def is_stale(self, now=None) -> bool:
        now = now or timezone.now()
        return (now - self.heartbeat_at).total_seconds() > settings.QUESTLOG_HEARTBEAT_TIMEOUT


class ConstraintSource(models.TextChoices):
    USER = "user"
    CORRECTION = "correction"
    AGENT = "agent"


class Constraint(Lifecycle):
    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="constraints")
    text = models.TextField()
    source = models.CharField(max_length=16, choices=ConstraintSource.choices, default=ConstraintSource.USER)
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # An edit retires the old text and adds a new constraint pointing back at it: history is kept.
    replaces = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaced_by")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.text[:60]
