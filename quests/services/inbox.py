from quests.models import Approval, ApprovalStatus, MemoryProposal, Milestone


def inbox_approvals(user):
    return Approval.objects.filter(owner=user, status=ApprovalStatus.PENDING)


def inbox_milestones(user):
    """Gate milestones wait on a person; others are reviewable too but do not block."""
    return Milestone.objects.awaiting_review().filter(owner=user)


def memory_proposals_waiting(user):
    """What an agent asked to remember, waiting for the person's decision (on the Memory page)."""
    return MemoryProposal.objects.filter(owner=user, status=MemoryProposal.Status.PENDING)


def _ids(qs):
    return qs.values("id").order_by()


def inbox_items_count(user) -> int:
    """What the inbox page lists: approvals and milestones (one query)."""
    return _ids(inbox_approvals(user)).union(_ids(inbox_milestones(user)), all=True).count()


def inbox_count(user) -> int:
    """The navigation's badge: everything waiting for the person, memory proposals included (one query)."""
    return _ids(inbox_approvals(user)).union(_ids(inbox_milestones(user)), _ids(memory_proposals_waiting(user)), all=True).count()
