"""What Celery beat starts: approvals about to expire, and the daily digest."""

from datetime import datetime, timedelta
from itertools import groupby

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from notifications import events
from notifications.models import EventKind, Notification
from quests.models import Approval, ApprovalStatus



def approvals_expiring(now: datetime | None = None) -> int:
    """`approval.expiring` for each pending approval whose respond-by time is within
    QUESTLOG_APPROVAL_EXPIRING_BEFORE; once per approval (its dedupe key), however often it runs."""
    now = now or timezone.now()
    soon = now + timedelta(seconds=settings.QUESTLOG_APPROVAL_EXPIRING_BEFORE)
    due = Approval.objects.filter(status=ApprovalStatus.PENDING, respond_by__gt=now, respond_by__lte=soon).select_related("mission")
    emitted = 0
    for approval in due:
        with transaction.atomic():
            emitted += events.notify_approval_expiring(approval.mission, approval) is not None
    return emitted


def digest_groups(notifications: list[Notification]) -> list[dict]:
    """Grouped by event kind, in the order the kinds are declared; oldest first in each."""
    order = {kind: i for i, kind in enumerate(EventKind.values)}
    ordered = sorted(notifications, key=lambda n: (order.get(n.kind, len(order)), n.pk))
    labels = dict(EventKind.choices)
    return [
        {
            "kind": kind, "label": labels.get(kind, kind),
            "items": [
                {"event_id": str(n.event_id), "mission_title": (n.data.get("mission") or {}).get("title", ""),
                 "needed": n.data.get("needed", ""), "url": n.data.get("url", "")}
                for n in items
            ],
        }
        for kind, items in ((kind, list(group)) for kind, group in groupby(ordered, key=lambda n: n.kind))
    ]


def digest_send(*, owner_id: int, day: str) -> Notification | None:
    """One digest for one person and day, listing every digest-mode notification not yet listed;
    none when nothing waits, or when today's was made already."""
    with transaction.atomic():
        waiting = list(Notification.objects.select_for_update().filter(owner_id=owner_id, in_digest=True, digest__isnull=True))
        if not waiting:
            return None
        digest = events.emit(
            kind="digest", owner_id=owner_id, dedupe_key=f"digest:{owner_id}:{day}", endpoints=[], email=True,
            data={"groups": digest_groups(waiting), "needed": f"{len(waiting)} waiting", "url": events.link("/approvals/")},
        )
        if digest is not None:
            Notification.objects.filter(pk__in=[n.pk for n in waiting]).update(digest=digest)
        return digest


def digests_send(now: datetime | None = None) -> int:
    day = timezone.localdate(now or timezone.now()).isoformat()
    owners = Notification.objects.filter(in_digest=True, digest__isnull=True).values_list("owner_id", flat=True).distinct()
    # Each person's digest in its own transaction: one that fails leaves the others sent.
    return sum(digest_send(owner_id=owner_id, day=day) is not None for owner_id in list(owners))
