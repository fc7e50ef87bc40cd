"""LangGraph threads as missions."""

from django.conf import settings
from django.db import models

from quests.models.mission import Mission


class GraphThread(models.Model):
    """A LangGraph thread of one user and the mission that holds it. It outlives the mission's
    state when deleted (`deleted_at`): a late write to a deleted thread is refused instead of
    bringing it back half-empty."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    thread_id = models.CharField(max_length=300)
    mission = models.OneToOneField(Mission, null=True, on_delete=models.SET_NULL, related_name="graph_thread")
    # The thread's first save made the mission (rather than joining a quest that already was): only
    # then does deleting the thread end and purge the mission.
    made_mission = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "thread_id"], name="graph_thread_unique_per_owner")]

    def __str__(self) -> str:
        return self.thread_id
