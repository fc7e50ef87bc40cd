"""Save-state storage: the lower layer. It never imports `quests`; missions and runs are string
references so that this layer can be reasoned about (and purged) on its own."""

from django.db import models
from django.db.models import Q

from checkpoints.refmap_models import CheckpointQuerySet, RefMap, SharedRefs


class RetentionClass(models.TextChoices):
    WORKING = "working", "Working state"
    LONG_TERM = "long_term", "Long-term memory"


class Lifecycle(models.Model):
    """Lifecycle metadata carried by every stored piece of state (the seed's privacy requirement):
    when it was created, its retention class, whether the user approved keeping it, and when it
    expires. The owning mission is each model's own foreign key."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    retention_class = models.CharField(max_length=16, choices=RetentionClass.choices, default=RetentionClass.WORKING)
    retention_approved_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        abstract = True


class Blob(Lifecycle):
    """Content-addressed bytes: stored once however many checkpoints refer to them. A blob is
    shared across missions, so it has no owning mission and no expiry of its own: it lives while
    a checkpoint or record refers to it, and the purge deletes it once nothing does."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    data = models.BinaryField()
    size_bytes = models.PositiveIntegerField()
    media_type = models.CharField(max_length=64, default="application/json")
    # A blob is never looked up by age or expiry (it lives while something refers to it), so the
    # lifecycle indexes every other stored piece has would only cost bytes on every checkpoint.
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_blob"

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size_bytes} B)"


class Trigger(models.TextChoices):
    AGENT = "agent"
    BACKGROUND = "background"
    APPROVAL = "approval"
    MILESTONE = "milestone"
    STOP = "stop"
    RESTORE = "restore"


# A restore (its parent is the checkpoint it restored), a first checkpoint (no parent) or a verified
# one: every other checkpoint's parent is the checkpoint written just before it.
BRANCH_POINTS = Q(trigger=Trigger.RESTORE) | Q(parent__isnull=True) | Q(verified=True)


class Checkpoint(SharedRefs, Lifecycle):
    """An immutable snapshot of a mission's save state. The state document and the agent's own
    state are stored part by part as blob references, so an unchanged part costs a reference; the
    references themselves are shared maps (`checkpoints.refmaps`): the state's map, and the agent
    state's base map with this checkpoint's delta on it. `state_refs` and `agent_state_refs` are
    the maps they resolve to (and may be given to the constructor: the maps are stored on save)."""

    # Not indexed alone: the unique (mission, seq) index serves every lookup by mission.
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="checkpoints", db_index=False)
    run = models.ForeignKey("quests.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    seq = models.PositiveIntegerField()
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    hash = models.CharField(max_length=64)
    verified = models.BooleanField(default=False)
    verified_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    # Not indexed, no database constraint: only the blob collector looks checkpoints up by map, in
    # one pass over all of them, and an index would cost the bytes the shared maps save.
    state_map = models.ForeignKey(RefMap, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    agent_map = models.ForeignKey(RefMap, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")
    agent_delta = models.JSONField(default=dict, blank=True)
    record_watermark = models.BigIntegerField(default=0)
    size_bytes = models.PositiveIntegerField(default=0)
    agent_state_bytes = models.PositiveIntegerField(default=0)
    new_bytes = models.PositiveIntegerField(default=0)
    # The compaction report is a shared map too (`compaction_report`): most checkpoints repeat their
    # parent's. Not indexed, no database constraint, like the refs' maps.
    report = models.ForeignKey(RefMap, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+")

    objects = CheckpointQuerySet.as_manager()
    # Not a field: the mission row's fingerprint as the agent's claimed write of this checkpoint
    # left it (engine.checkpoints.Known), when that write knew it.
    mission_after: str | None = None
    # Not a field: what a write with a row of more (engine.checkpoints.Claim.also) answered of it.
    also_answered: tuple = ()

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_checkpoint"
        constraints = [models.UniqueConstraint(fields=["mission", "seq"], name="checkpoint_seq_unique_per_mission")]
        indexes = [
            # (The newest checkpoints of a mission are read backwards along the unique (mission, seq) index.)
            # The few checkpoints that shape a history (restores, first ones, verified ones) are read
            # without scanning the others: the mission page draws any history from them.
            models.Index(fields=["mission", "seq"], name="checkpoint_branch_points", condition=BRANCH_POINTS),
            # Pruning looks for old, unverified background snapshots across all missions.
            models.Index(
                fields=["created_at", "mission"],
                name="checkpoint_prunable",
                condition=Q(trigger="background", verified=False),
            ),
        ]
        ordering = ["-seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.trigger}"


class RecordKind(models.TextChoices):
    DECISION = "decision"
    OPEN_QUESTION = "open_question"
    BLOCKER = "blocker"
    DEPENDENCY = "dependency"
    EVIDENCE = "evidence"
    NOTE = "note"
    TOOL_OUTPUT = "tool_output"


# Kinds that are kept in every checkpoint until resolved, and never compacted.
DURABLE_RECORD_KINDS = (RecordKind.DECISION, RecordKind.OPEN_QUESTION, RecordKind.BLOCKER, RecordKind.DEPENDENCY)


class RecordQuerySet(models.QuerySet):
    def live(self) -> "RecordQuerySet":
        """Records the next run still sees: neither resolved nor set aside by a restore."""
        return self.filter(resolved=False, abandoned=False)


class Record(Lifecycle):
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="records")
    run = models.ForeignKey("quests.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=16, choices=RecordKind.choices)
    text = models.TextField()
    data = models.JSONField(null=True, blank=True)
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    size_bytes = models.PositiveIntegerField(default=0)
    resolved = models.BooleanField(default=False)
    resolved_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    abandoned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)

    objects = RecordQuerySet.as_manager()

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_record"
        indexes = [
            models.Index(
                fields=["mission", "kind", "id"],
                name="record_live_by_kind",
                condition=Q(resolved=False, abandoned=False),
            )
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.text[:40]}"


class OperationStatus(models.TextChoices):
    PLANNED = "planned"
    ATTEMPTED = "attempted"
    COMPLETED = "completed"
    FAILED = "failed"


class Operation(Lifecycle):
    """One external side effect, keyed by an idempotency key unique per mission."""

    # Not indexed alone: the (mission, id) index serves every lookup by mission.
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="operations", db_index=False)
    run = models.ForeignKey("quests.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    kind = models.CharField(max_length=100)
    target = models.CharField(max_length=500)
    request = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=OperationStatus.choices, default=OperationStatus.PLANNED)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    external_id = models.CharField(max_length=500, blank=True, default="")
    external_status = models.CharField(max_length=100, blank=True, default="")
    receipt = models.JSONField(null=True, blank=True)
    completion_hash = models.CharField(max_length=64, blank=True, default="")
    error = models.TextField(blank=True, default="")
    retryable = models.BooleanField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_operation"
        constraints = [models.UniqueConstraint(fields=["mission", "key"], name="operation_key_unique_per_mission")]
        indexes = [
            # A change reads the ledger chunk holding its operation (a range of ids within the
            # mission): along this index it visits the chunk only, however long the ledger.
            models.Index(fields=["mission", "id"], name="operation_by_mission_and_id"),
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        """Nothing more may be attempted: it completed, or it failed and said a retry is useless."""
        return self.status == OperationStatus.COMPLETED or (self.status == OperationStatus.FAILED and self.retryable is False)


class OperationEvent(Lifecycle):
    """History of what was learned about an operation's external object (attempts, receipts,
    later observations such as `confirmed` → `cancelled`). Receipts are working state of the
    operation's mission, so the events carry lifecycle metadata like the operation itself."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="events")
    event = models.CharField(max_length=16)
    external_status = models.CharField(max_length=100, blank=True, default="")
    receipt = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_operationevent"
        ordering = ["id"]


class SnapshotRequest(models.Model):
    """A request for a background snapshot: the database row, not the broker message, is the
    source of truth for work to do, so a lost message delays a snapshot but never loses it."""

    class Status(models.TextChoices):
        PENDING = "pending"
        CLAIMED = "claimed"
        DONE = "done"

    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="snapshot_requests")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    requested_at = models.DateTimeField(auto_now_add=True)
    not_before = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.CharField(max_length=64, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    outcome = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_snapshotrequest"
        constraints = [
            # At most one pending request per mission: activity during the debounce window joins
            # it. A claimed one may coexist: activity that lands while a worker is writing the
            # snapshot needs a request of its own, or it would wait for the next activity.
            models.UniqueConstraint(
                fields=["mission"],
                condition=Q(status="pending"),
                name="one_pending_snapshot_request_per_mission",
            )
        ]
        indexes = [
            models.Index(fields=["status", "not_before"], name="snapshot_request_due"),
            # The debounce reads a mission's latest request.
            models.Index(fields=["mission", "-id"], name="snapshot_request_latest"),
        ]


class RetentionPolicy(models.Model):
    """Staff-set rules for how long state is kept. Rows are versions: a change writes a new row
    (`quests.retention.services.policy.retention_policy_update`), the newest is in force, and the
    older ones stay as its history, so a purge log's policy is the version it actually ran under.
    A row is never edited once written."""

    grace_days = models.PositiveIntegerField(default=30, help_text="Days working state is kept after its mission ends.")
    approved_max_days = models.PositiveIntegerField(default=365, help_text="Days a quest's history is kept when its owner chose to keep it.")
    memory_max_days = models.PositiveIntegerField(default=365, help_text="Days a memory item lives before renewal.")
    snapshot_prune_days = models.PositiveIntegerField(default=7, help_text="Background snapshots older than this are pruned.")
    snapshot_keep_newest = models.PositiveIntegerField(default=20, help_text="Background snapshots always kept per mission.")
    purge_batch_size = models.PositiveIntegerField(default=200)
    # The version's own time and author: set when the row is written, never after.
    updated_at = models.DateTimeField(auto_now_add=True, verbose_name="in force from")
    updated_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", verbose_name="set by")

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_retentionpolicy"
        verbose_name_plural = "retention policies"
        ordering = ["-id"]
        get_latest_by = "id"

    def __str__(self) -> str:
        return f"grace {self.grace_days}d, memory {self.memory_max_days}d"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("A retention policy is never edited: a change writes a new version.")
        super().save(*args, **kwargs)

    @classmethod
    def current(cls) -> "RetentionPolicy":
        policy = cls.objects.order_by("-id").first()
        return policy or cls.objects.create()


class PurgeLog(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    policy = models.ForeignKey(RetentionPolicy, null=True, on_delete=models.SET_NULL, related_name="+")
    policy_snapshot = models.JSONField(default=dict)
    as_of = models.DateTimeField()
    dry_run = models.BooleanField(default=False)
    counts = models.JSONField(default=dict)
    trigger = models.CharField(max_length=32, default="schedule")
    actor = models.CharField(max_length=150, blank=True, default="")
    # Counts are written in the same transaction as each batch, so an interrupted purge leaves
    # a log that says exactly what was deleted; `finished_at` stays empty and `error` says why.
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_purgelog"
        ordering = ["-id"]
