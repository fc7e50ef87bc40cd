"""What waits for a person: the approvals an agent asks and the milestones it claims, each kept
beside its mission's owner, and the standing decisions that answer an action's requests ahead."""

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

    def save(self, *args, **kwargs):
        self.copy_owner()
        super().save(*args, **kwargs)

    def copy_owner(self) -> None:
        if self.owner_id is None:
            self.owner_id = self.mission.owner_id


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
    checkpoint = models.ForeignKey("quests.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    respond_by = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The agent's own id for what it asks (a LangGraph interrupt id, an OpenAI Agents tool call
    # id): how an adapter matches a person's decision to the pause it answers.
    agent_ref = models.CharField(max_length=200, blank=True, default="")
    # Where a graph asked it: the node, and which of that node's questions it is (a node that calls
    # interrupt() three times asks questions 1, 2 and 3, one after another). Blank for others.
    node = models.CharField(max_length=200, blank=True, default="")
    question = models.PositiveIntegerField(null=True, blank=True)
    # Decided once for every call of this action in the mission (a standing decision made it, or
    # this decision made a standing decision): an adapter passes it on as its framework's "always".
    always = models.BooleanField(default=False)

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
    checkpoint = models.ForeignKey("quests.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
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


class StandingDecision(models.Model):
    """A person's decision for every later request of one action (a tool's name) in one mission,
    until revoked: "always approve sending email in this quest". Requests it covers are decided
    when asked; the OpenAI Agents store maps it to the SDK's `always_approve` / `always_reject`."""

    mission = models.ForeignKey("quests.Mission", on_delete=models.CASCADE, related_name="standing_decisions")
    action = models.CharField(max_length=500)
    decision = models.CharField(max_length=16, choices=[("approve", "Always approve"), ("reject", "Always reject")])
    note = models.TextField(blank=True, default="")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["id"]
        constraints = [
            # One decision stands per action at a time; revoked ones stay as the record of what was.
            models.UniqueConstraint(fields=["mission", "action"], condition=Q(revoked_at__isnull=True), name="standing_decision_one_per_action"),
        ]

    def __str__(self) -> str:
        return f"{self.get_decision_display()} {self.action}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
