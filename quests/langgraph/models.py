"""LangGraph's rows: a thread of one user and the mission holding it (`GraphThread`), where
LangGraph finds each of its checkpoints (`GraphCheckpoint`) and a task's pending writes
(`GraphWrite`). The last two keep the `checkpoints` app's label, and so their tables, beside the
save state they point into."""

from django.conf import settings
from django.db import models

from checkpoints.models import Checkpoint, Lifecycle


class GraphThread(models.Model):
    """A LangGraph thread of one user and the mission that holds it. It outlives the mission's
    state when deleted (`deleted_at`): a late write to a deleted thread is refused instead of
    bringing it back half-empty."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    thread_id = models.CharField(max_length=300)
    mission = models.OneToOneField("quests.Mission", null=True, on_delete=models.SET_NULL, related_name="graph_thread")
    # The thread's first save made the mission (rather than joining a quest that already was): only
    # then does deleting the thread end and purge the mission.
    made_mission = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "thread_id"], name="graph_thread_unique_per_owner")]

    def __str__(self) -> str:
        return self.thread_id


class GraphCheckpoint(Lifecycle):
    """Where LangGraph finds one of its checkpoints (`questlog_client.langgraph.QuestlogSaver`).
    The save state is the Questlog checkpoint it names, so the mission page, restore, compaction
    and retention treat it like any other; this row keeps what LangGraph looks it up by: its
    namespace and id within the thread (the mission), its parent, its metadata (filterable), and
    which blob holds each channel's value at the version the checkpoint saw."""

    checkpoint = models.OneToOneField(Checkpoint, on_delete=models.CASCADE, related_name="graph")
    # Not indexed alone: the unique (mission, ns, graph_id) index serves every lookup by mission.
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="+", db_index=False)
    ns = models.CharField(max_length=500, blank=True, default="")
    # LangGraph's own ids (uuid6 text): they sort by time, so "newest first" is "largest first".
    graph_id = models.CharField(max_length=100)
    parent_graph_id = models.CharField(max_length=100, blank=True, default="")
    # The checkpoint without its channel values: v, ts, channel_versions, versions_seen, …
    skeleton = models.JSONField(default=dict)
    metadata = models.JSONField(default=dict)
    # {channel: [version, blob sha256]}: a channel that did not change is a reference, not a copy.
    channels = models.JSONField(default=dict)
    # LangGraph's run id (metadata `run_id`), for `delete_for_runs`.
    run_ref = models.CharField(max_length=100, blank=True, default="", db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_graphcheckpoint"
        constraints = [models.UniqueConstraint(fields=["mission", "ns", "graph_id"], name="graph_checkpoint_unique_per_thread")]

    def __str__(self) -> str:
        return f"{self.ns or '(root)'} {self.graph_id}"


class GraphWrite(Lifecycle):
    """A pending write of a LangGraph task on a checkpoint: kept until the next checkpoint of the
    namespace, so a task that finished before a crash is not run again. It names its checkpoint by
    LangGraph's ids rather than by a foreign key: LangGraph saves a checkpoint in the background and
    may send the writes of its first tasks before that save arrives. `value` is the client's
    encoding ({"type", "data"}), opaque here."""

    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="+", db_index=False)
    ns = models.CharField(max_length=500, blank=True, default="")
    graph_id = models.CharField(max_length=100)
    task_id = models.CharField(max_length=100)
    task_path = models.CharField(max_length=500, blank=True, default="")
    # LangGraph's index of the write in its task; special channels (errors, interrupts) are negative.
    idx = models.IntegerField()
    channel = models.CharField(max_length=500)
    value = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_graphwrite"
        constraints = [models.UniqueConstraint(fields=["mission", "ns", "graph_id", "task_id", "idx"], name="graph_write_unique_per_task")]
        ordering = ["task_path", "task_id", "idx"]

    def __str__(self) -> str:
        return f"{self.task_id}[{self.idx}] {self.channel}"
