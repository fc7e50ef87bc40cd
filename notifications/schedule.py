"""What Celery beat starts: approvals about to expire, and the daily digest."""

from datetime import datetime, timedelta
from itertools import groupby

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from notifications import events
from notifications.models import EventKind, Notification
from quests.models import Approval, ApprovalStatus, Milestone, Mission, MissionStatus


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
            "kind": kind,
            "label": labels.get(kind, kind),
            "items": [
                {
                    "event_id": str(n.event_id),
                    "mission_title": (n.data.get("mission") or {}).get("title", ""),
                    "needed": n.data.get("needed", ""),
                    "url": n.data.get("url", ""),
                }
                for n in items
            ],
        }
        for kind, items in ((kind, list(group)) for kind, group in groupby(ordered, key=lambda n: n.kind))
    ]


def moved_on(notifications: list[Notification]) -> set[int]:
    """The notifications whose cause no longer waits for the person: an approval decided or
    withdrawn since, a milestone reviewed, a quest no longer blocked or failed. A digest lists what
    waits, not what happened while nobody read the mail (three queries, whatever the count)."""

    def ids(kinds: tuple[str, ...], part: str) -> dict[int, int | None]:
        return {n.pk: (n.data.get(part) or {}).get("id") for n in notifications if n.kind in kinds}

    def known(by_notification: dict[int, int | None]) -> list[int]:
        return [pk for pk in by_notification.values() if pk is not None]

    approvals = ids((EventKind.APPROVAL_REQUESTED, EventKind.APPROVAL_EXPIRING), "approval")
    milestones = ids((EventKind.MILESTONE_AWAITING_REVIEW,), "milestone")
    missions: dict[int, int | None] = {n.pk: n.mission_id for n in notifications if n.kind in MISSION_STILL}
    # (An id missing from a notification's data is None: Django's `in` drops it, as these do.)
    pending = set(Approval.objects.filter(pk__in=known(approvals), status=ApprovalStatus.PENDING).values_list("pk", flat=True))
    to_review = set(Milestone.objects.awaiting_review().filter(pk__in=known(milestones)).values_list("pk", flat=True))
    statuses: dict[int | None, str] = dict(Mission.objects.filter(pk__in=known(missions)).values_list("pk", "status"))
    by_kind = {n.pk: n.kind for n in notifications}
    return (
        {pk for pk, approval_id in approvals.items() if approval_id not in pending}
        | {pk for pk, milestone_id in milestones.items() if milestone_id not in to_review}
        | {pk for pk, mission_id in missions.items() if statuses.get(mission_id) != MISSION_STILL[by_kind[pk]]}
    )


# A quest's event still waits while the quest is in the status that caused it.
MISSION_STILL: dict[str, str] = {EventKind.MISSION_BLOCKED: MissionStatus.BLOCKED, EventKind.MISSION_FAILED: MissionStatus.FAILED}


def digest_send(*, owner_id: int, day: str) -> Notification | None:
    """One digest for one person and day, listing every digest-mode notification not yet listed
    whose cause still waits; none when nothing does, or when today's was made already. What moved
    on since it was announced leaves the queue unlisted."""
    with transaction.atomic():
        queued = list(Notification.objects.select_for_update().filter(owner_id=owner_id, in_digest=True, digest__isnull=True))
        gone = moved_on(queued)
        if gone:
            Notification.objects.filter(pk__in=gone).update(in_digest=False)
        waiting = [n for n in queued if n.pk not in gone]
        if not waiting:
            return None
        digest = events.emit(
            kind="digest",
            owner_id=owner_id,
            dedupe_key=f"digest:{owner_id}:{day}",
            endpoints=[],
            email=True,
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
