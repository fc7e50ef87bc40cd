"""What waits for a person: the approvals an agent asks and the milestones it claims, each kept
beside its mission's owner (the models' home; quests.models imports them, so they are reachable
from there as every other model of the app)."""

from django.conf import settings
from django.db import models
from django.db.models import Count, Q

from checkpoints.models import Lifecycle


class WaitingQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for obj in objs:
            obj.copy_owner()
        return super().bulk_create(objs, *args, **kwargs)


class WaitsForAPerson(models.Model):
    """What waits for a person (approvals, milestones) waits for its mission's owner. The owner is
    copied onto the row, once, when it is written (a mission never changes hands): the inbox and
    its count in every page's navigation then read one index of what waits for this person, not a
    join through every mission she has (10,000 missions made it the slowest part of each page)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", editable=False)

    class Meta:
        abstract = True

    def copy_owner(self) -> None:
        if self.owner_id is None:
            self.owner_id = self.mission.owner_id

    def save(self, *args, **kwargs):
        self.copy_owner()
        super().save(*args, **kwargs)


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EDITED = "edited"
    EXPIRED = "expired"


class Approval(Lifecycle, WaitsForAPerson):
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="approvals")
    run = models.ForeignKey("quests.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=500)
    payload = models.JSONField(default=dict)
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    decided_payload = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    checkpoint = models.ForeignKey("checkpoints.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    respond_by = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The agent's own id for what it asks (a LangGraph interrupt id, an OpenAI Agents tool call
    # id): how an adapter matches a person's decision to the pause it answers.
    agent_ref = models.CharField(max_length=200, blank=True, default="")

    objects = WaitingQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["status", "respond_by"], name="approval_pending_expiry"),
            # The inbox, oldest first, and its count on every page: the few pending among all ever asked.
            models.Index(fields=["owner", "created_at"], condition=models.Q(status="pending"), name="approval_pending_oldest"),
        ]

    def __str__(self) -> str:
        return self.action


class MilestoneKind(models.TextChoices):
    RESEARCH_COMPLETE = "research_complete"
    PLAN_APPROVED = "plan_approved"
    DATA_VERIFIED = "data_verified"
    DRAFT_READY = "draft_ready"
    DEPLOYMENT_PAUSED = "deployment_paused"
    MILESTONE_REVIEWED = "milestone_reviewed"
    CUSTOM = "custom"


class ReviewStatus(models.TextChoices):
    PENDING_REVIEW = "pending_review"
    APPROVED = "approved"
    CORRECTED = "corrected"
    # A gate milestone still pending when its mission is restored past it.
    EXPIRED = "expired"


# Milestones a person still has to review: unreviewed and not withdrawn from the inbox.
AWAITING_REVIEW = Q(review_status=ReviewStatus.PENDING_REVIEW, withdrawn=False)


class MilestoneQuerySet(WaitingQuerySet):
    def awaiting_review(self) -> "MilestoneQuerySet":
        return self.filter(AWAITING_REVIEW)

    def kind_status_counts(self) -> dict[tuple[str, str], int]:
        """How many milestones of each (kind, review status): what `Mission.progress_of_counts`
        reads, a few rows from the database whatever the number of milestones."""
        rows = self.order_by().values("kind", "review_status").annotate(n=Count("id")).values_list("kind", "review_status", "n")
        return {(kind, status): n for kind, status, n in rows}

    def gates_awaiting_review(self) -> "MilestoneQuerySet":
        """The ones that hold their mission until a person reviews them."""
        return self.awaiting_review().filter(gate=True)


class Milestone(Lifecycle, WaitsForAPerson):
    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="milestones")
    run = models.ForeignKey("quests.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=32, choices=MilestoneKind.choices)
    title = models.CharField(max_length=300)
    summary = models.TextField(blank=True, default="")
    evidence = models.JSONField(default=list, blank=True)
    gate = models.BooleanField(default=False)
    checkpoint = models.ForeignKey("checkpoints.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    review_status = models.CharField(max_length=16, choices=ReviewStatus.choices, default=ReviewStatus.PENDING_REVIEW)
    note = models.TextField(blank=True, default="")
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Cancel or completion withdraws a pending milestone from the inbox without reviewing it.
    withdrawn = models.BooleanField(default=False)

    objects = MilestoneQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            # The inbox, oldest first, and its count on every page: the few awaiting review among all ever claimed.
            models.Index(fields=["owner", "created_at"], condition=models.Q(review_status="pending_review", withdrawn=False), name="milestone_awaiting_oldest"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def is_awaiting_review(self) -> bool:
        """`Milestone.objects.awaiting_review()` for a row already in memory."""
        return self.review_status == ReviewStatus.PENDING_REVIEW and not self.withdrawn

    @property
    def is_gate_awaiting_review(self) -> bool:
        return self.gate and self.is_awaiting_review
