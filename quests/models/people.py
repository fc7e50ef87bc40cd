"""What a person keeps: long-term memory (and the agents' proposals for it), the agent tokens they
made, and their own settings for the pages."""

from django.conf import settings
from django.db import models

from checkpoints.models import Lifecycle, RetentionClass
from quests.models.mission import Mission, Run


class MemoryProposal(Lifecycle):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DECLINED = "declined"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_proposals")
    mission = models.ForeignKey(Mission, null=True, on_delete=models.CASCADE, related_name="memory_proposals")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=200)
    value = models.TextField()
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]


class MemoryItem(Lifecycle):
    """Long-term memory about a person: exists only because that person approved it."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_items")
    name = models.CharField(max_length=200)
    value = models.TextField()
    source_mission = models.ForeignKey(Mission, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    proposal = models.OneToOneField(MemoryProposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="item")
    approved_at = models.DateTimeField()

    class Meta:
        ordering = ["name", "id"]

    def save(self, *args, **kwargs):
        self.retention_class = RetentionClass.LONG_TERM
        super().save(*args, **kwargs)


class AgentToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_tokens")
    mission = models.ForeignKey(Mission, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, blank=True, default="")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name or 'token'} ({self.prefix}…)"


class PersonSettings(models.Model):
    """A person's own choices for the pages. An empty time zone means the browser's: the pages read
    it from the cookie static/js/questlog.js keeps (quests.middleware.PersonTimeZoneMiddleware)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="questlog_settings")
    time_zone = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.user} · {self.time_zone or 'browser time zone'}"
