"""Where events enter the outbox. The quests services call one function here from inside the
transaction that makes the event happen, so a notification exists exactly when its event does
(a rolled-back request leaves none). Delivery is published after the commit, by task name.

What goes into `data` is chosen here and nowhere else: ids, titles, the action and reason, the
respond-by time and links to the pages where the person decides. Never agent state, payloads or
checkpoint contents."""

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from notifications.models import (
    DEFAULT_MODES,
    Channel,
    Delivery,
    DeliveryStatus,
    EventKind,
    Mode,
    Notification,
    NotificationPreference,
    WebhookEndpoint,
)
from quests.engine import outbox, runner

logger = logging.getLogger(__name__)
# mission status -> the event its arrival emits
MISSION_EVENTS = {"blocked": EventKind.MISSION_BLOCKED, "failed": EventKind.MISSION_FAILED, "completed": EventKind.MISSION_COMPLETED}
DELIVERY_TASK = "notifications.tasks.delivery_send_task"


def link(path: str) -> str:
    return settings.QUESTLOG_BASE_URL + path


def mission_data(mission: Any) -> dict[str, Any]:
    return {"id": mission.pk, "title": mission.title, "status": mission.status, "url": link(reverse("mission", args=[mission.pk]))}


def notify_approvals_requested(mission: Any, approvals: Iterable[Any]) -> None:
    """Each approval still pending once standing decisions had their say; a batch costs the same
    statements whatever its size."""
    pending = [approval for approval in approvals if approval.status == "pending"]
    if pending:
        emit_many(
            kind=EventKind.APPROVAL_REQUESTED,
            owner_id=mission.owner_id,
            mission=mission,
            events=[(f"approval.requested:{approval.pk}", approval_data(mission, approval)) for approval in pending],
        )


def notify_approval_expiring(mission: Any, approval: Any) -> Notification | None:
    return emit(
        kind=EventKind.APPROVAL_EXPIRING,
        owner_id=mission.owner_id,
        mission=mission,
        dedupe_key=f"approval.expiring:{approval.pk}",
        data=approval_data(mission, approval),
    )


def approval_data(mission: Any, approval: Any) -> dict[str, Any]:
    respond_by: datetime | None = approval.respond_by
    return {
        "mission": mission_data(mission),
        "approval": {"id": approval.pk, "action": approval.action, "reason": approval.reason, "respond_by": respond_by.isoformat() if respond_by else None},
        "needed": f"Approve or reject “{approval.action}”",
        "reason": approval.reason,
        "url": link(reverse("inbox")) + f"#approval-{approval.pk}",
    }


def notify_milestone_claimed(mission: Any, milestone: Any) -> None:
    emit(
        kind=EventKind.MILESTONE_AWAITING_REVIEW,
        owner_id=mission.owner_id,
        mission=mission,
        dedupe_key=f"milestone.awaiting_review:{milestone.pk}",
        data={
            "mission": mission_data(mission),
            "milestone": {"id": milestone.pk, "kind": milestone.kind, "title": milestone.title, "gate": milestone.gate},
            "needed": f"Review the milestone “{milestone.title}”",
            "reason": milestone.summary[:500],
            "url": link(reverse("inbox")) + f"#milestone-{milestone.pk}",
        },
    )


def notify_mission_moved(mission: Any, to: str) -> None:
    """Called by every mission transition; only blocked, failed and completed are events. The
    mission's state version tells one arrival from a later one."""
    kind = MISSION_EVENTS.get(to)
    if kind is None:
        return
    needed = {
        EventKind.MISSION_BLOCKED: "Nothing, unless you can unblock it",
        EventKind.MISSION_FAILED: "Look at the quest and decide how it goes on",
        EventKind.MISSION_COMPLETED: "Nothing: the quest is done",
    }[kind]
    emit(
        kind=kind,
        owner_id=mission.owner_id,
        mission=mission,
        dedupe_key=f"{kind}:{mission.pk}:{mission.state_version}",
        data={"mission": mission_data(mission), "needed": needed, "reason": mission.stop_detail[:500], "url": mission_data(mission)["url"]},
    )


def notify_run_stalled(mission: Any, run: Any) -> None:
    emit(
        kind=EventKind.RUN_STALLED,
        owner_id=mission.owner_id,
        mission=mission,
        dedupe_key=f"run.stalled:{run.pk}",
        data={
            "mission": mission_data(mission),
            "run": {"id": run.pk, "number": run.number, "agent": run.agent},
            "needed": "Check on the agent: its run stopped sending heartbeats",
            "reason": run.stop_detail[:500],
            "url": mission_data(mission)["url"],
        },
    )


def mode_for(owner_id: int, kind: str) -> str:
    chosen = NotificationPreference.objects.filter(owner_id=owner_id, kind=kind).values_list("mode", flat=True).first()
    return chosen or DEFAULT_MODES.get(kind, Mode.IMMEDIATELY)


def endpoints_for(owner_id: int, kind: str) -> list[WebhookEndpoint]:
    return [e for e in WebhookEndpoint.objects.filter(owner_id=owner_id, disabled_at__isnull=True) if kind in e.events]


def emit(
    *,
    kind: str,
    owner_id: int,
    dedupe_key: str,
    data: dict[str, Any],
    mission: Any = None,
    endpoints: list[WebhookEndpoint] | None = None,
    email: bool | None = None,
) -> Notification | None:
    """Write one notification and its deliveries in the caller's transaction; None when this
    event was emitted before. `endpoints` and `email` override the person's choices (a test
    event goes to one endpoint; a disabled endpoint is told by email only)."""
    mode = None if email is None else Mode.IMMEDIATELY if email else Mode.OFF
    made = emit_many(kind=kind, owner_id=owner_id, mission=mission, events=[(dedupe_key, data)], endpoints=endpoints, mode=mode)
    return made[0] if made else None


def emit_many(
    *,
    kind: str,
    owner_id: int,
    events: list[tuple[str, dict[str, Any]]],
    mission: Any = None,
    endpoints: list[WebhookEndpoint] | None = None,
    mode: str | None = None,
) -> list[Notification]:
    """Several events of one kind for one person, `(dedupe_key, data)` each, in a fixed number of
    statements (one on PostgreSQL: `quests.engine.outbox`); those emitted before are left out."""
    if runner.is_postgresql():
        return _emit_in_one_statement(kind=kind, owner_id=owner_id, events=events, mission=mission, endpoints=endpoints, mode=mode)
    seen = set(Notification.objects.filter(dedupe_key__in=[key for key, _ in events]).values_list("dedupe_key", flat=True))
    events = [(key, data) for key, data in events if key not in seen]
    if not events:
        return []
    mode = mode or mode_for(owner_id, kind)
    try:
        with transaction.atomic():  # a savepoint: a concurrent twin loses here, not the caller's transaction
            notifications = Notification.objects.bulk_create(
                Notification(kind=kind, owner_id=owner_id, dedupe_key=key, data=data, mission=mission, in_digest=mode == Mode.DIGEST) for key, data in events
            )
    except IntegrityError:
        return []
    if endpoints is None:
        endpoints = endpoints_for(owner_id, kind)
    deliveries = []
    for notification in notifications:
        if mode == Mode.IMMEDIATELY:
            deliveries.append(Delivery(notification=notification, channel=Channel.EMAIL, message_id=f"{notification.event_id.hex}.email"))
        deliveries += [
            Delivery(notification=notification, channel=Channel.WEBHOOK, endpoint=endpoint, message_id=f"msg_{notification.event_id.hex}_{endpoint.pk}")
            for endpoint in endpoints
        ]
    for delivery in deliveries:
        delivery.next_attempt_at = delivery.notification.created_at
        delivery.status = DeliveryStatus.PENDING
    ids = [d.pk for d in Delivery.objects.bulk_create(deliveries)]
    if ids:
        transaction.on_commit(lambda: publish(ids))
    return notifications


def _emit_in_one_statement(
    *, kind: str, owner_id: int, events: list[tuple[str, dict[str, Any]]], mission: Any, endpoints: list[WebhookEndpoint] | None, mode: str | None
) -> list[Notification]:
    """`emit_many` as the engine's one statement: the same rows, and the same notifications answered."""
    notifications, delivery_ids = outbox.emit(
        kind=kind,
        owner_id=owner_id,
        mission_id=mission.pk if mission is not None else None,
        events=[(key, uuid.uuid4(), data) for key, data in events],
        mode=mode,
        default_mode=DEFAULT_MODES.get(kind, Mode.IMMEDIATELY),
        endpoint_ids=None if endpoints is None else [endpoint.pk for endpoint in endpoints],
        now=timezone.now(),
    )
    if delivery_ids:
        transaction.on_commit(lambda: publish(delivery_ids))
    return notifications


def publish(delivery_ids: list[int]) -> None:
    """After the commit. A publish that fails (the broker is down) is not lost: the delivery row
    is pending, and the sweep publishes it again."""
    for delivery_id in delivery_ids:
        try:
            current_app.send_task(DELIVERY_TASK, args=[delivery_id])
        except Exception:  # noqa: BLE001 - any broker failure: the sweep's to retry
            logger.warning("Deliveries %s not published; the sweep will retry them.", delivery_ids, exc_info=True)
            return
