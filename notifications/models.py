"""The outbox (`Notification`, one row per event; `Delivery`, one row per event and channel), a
person's webhook endpoints and their choices per event kind."""

import uuid

from django.conf import settings
from django.db import models


class EventKind(models.TextChoices):
    APPROVAL_REQUESTED = "approval.requested", "An approval is requested"
    APPROVAL_EXPIRING = "approval.expiring", "An approval is about to expire"
    MILESTONE_AWAITING_REVIEW = "milestone.awaiting_review", "A milestone awaits review"
    MISSION_BLOCKED = "mission.blocked", "A quest is blocked"
    MISSION_FAILED = "mission.failed", "A quest failed"
    MISSION_COMPLETED = "mission.completed", "A quest is completed"
    RUN_STALLED = "run.stalled", "A run stalled"


# Not events a person subscribes to: the daily digest, an endpoint's test, an endpoint disabled.
SYSTEM_KINDS = ("digest", "webhook.test", "webhook.disabled")


class Mode(models.TextChoices):
    IMMEDIATELY = "immediately", "Immediately"
    DIGEST = "digest", "In the daily digest"
    OFF = "off", "Off"


# Approvals and milestones wait on the person: they are told at once. The rest can wait a day.
DEFAULT_MODES = {kind: Mode.IMMEDIATELY if kind.startswith(("approval.", "milestone.")) else Mode.DIGEST for kind in EventKind.values}


class Notification(models.Model):
    """One event for one person. `dedupe_key` makes a second emission of the same event (a hook
    reached twice, a beat task run twice) a no-op; `event_id` is the id receivers see."""

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    dedupe_key = models.CharField(max_length=200, unique=True)
    mission = models.ForeignKey("quests.Mission", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Ids, titles, action, reason, respond-by and links only: never agent state or checkpoint contents.
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    # The person chose the daily digest for this kind when it happened, and it waits for one;
    # `digest` is set once a digest (itself a notification) has listed it. Cleared, unlisted, when
    # its cause moved on before the digest (an approval decided meanwhile).
    in_digest = models.BooleanField(default=False)
    digest = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="listed")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "in_digest", "digest"], name="notification_digest_pending")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.owner} ({self.event_id})"


class Format(models.TextChoices):
    STANDARD = "standard", "Standard Webhooks (JSON)"
    SLACK = "slack", "Slack incoming webhook"


class WebhookEndpoint(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.STANDARD)
    # Kept readable: every delivery is signed with it. Shown to the person once, at creation.
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.url


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    GAVE_UP = "gave_up", "Gave up"
    SKIPPED = "skipped", "Skipped"


class Delivery(models.Model):
    """One event on one channel (an email, or one endpoint). Its `message_id` is the same on
    every attempt: the webhook's `webhook-id`, the email's Message-ID."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    endpoint = models.ForeignKey(WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=200, unique=True)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # A worker holds a delivery while it sends; one that died mid-send lets go when this passes.
    leased_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return self.message_id


class NotificationPreference(models.Model):
    """A person's choice for one event kind; without a row, `DEFAULT_MODES` holds."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences")
    kind = models.CharField(max_length=40, choices=EventKind.choices)
    mode = models.CharField(max_length=12, choices=Mode.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "kind"], name="notification_preference_unique")]
