from quests.models import Approval, ApprovalStatus, Milestone


def inbox_approvals(user):
    return Approval.objects.filter(owner=user, status=ApprovalStatus.PENDING)


def inbox_milestones(user):
    """Gate milestones wait on a person; others are reviewable too but do not block."""
    return Milestone.objects.awaiting_review().filter(owner=user)


def inbox_count(user) -> int:
    return inbox_approvals(user).count() + inbox_milestones(user).count()
