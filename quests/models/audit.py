"""What was done and asked: the append-only audit trail, and the creating requests remembered by
their idempotency key."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from quests.models.mission import Mission
from quests.models.people import AgentToken


class IdempotentRequest(models.Model):
    """A creating POST that carried a `key`: the same key with the same body replays the original
    resource; a different body is `key_reuse`. One table serves every kind of creation."""

    # Not indexed alone: the unique (owner, scope, key) index serves lookups by owner.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False)
    scope = models.CharField(max_length=100)
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    object_id = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "scope", "key"], name="idempotent_request_unique")]


class AuditEvent(models.Model):
    """Append-only: who changed what, from which state to which, and when."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    mission = models.ForeignKey(Mission, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = models.CharField(max_length=200)
    entity = models.CharField(max_length=32)
    entity_id = models.BigIntegerField(null=True)
    action = models.CharField(max_length=64)
    from_state = models.CharField(max_length=32, blank=True, default="")
    to_state = models.CharField(max_length=32, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("Audit events are append-only.")
        super().save(*args, **kwargs)
