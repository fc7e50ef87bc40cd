from django.db.models import Q

from quests.models import Approval, ApprovalStatus, Milestone, ReviewStatus


def inbox_approvals(user):
    return Approval.objects.filter(mission__owner=user, status=ApprovalStatus.PENDING)


def inbox_milestones(user):
    """Gate milestones wait on a person; others are reviewable too but do not block."""
    return Milestone.objects.filter(mission__owner=user, review_status=ReviewStatus.PENDING_REVIEW, withdrawn=False)


def inbox_count(user) -> int:
    return inbox_approvals(user).count() + inbox_milestones(user).count()
