"""Sending one delivery, at least once. A worker leases the row with a compare-and-set (so two
messages for the same delivery never send at once), sends outside any transaction, and records
the outcome. A failure is retried with exponential backoff (Celery's own interval function, the
task's `retry`), and given up QUESTLOG_NOTIFY_GIVE_UP_AFTER after the first attempt; a webhook
endpoint given up on is disabled and its owner told by email. The sweep publishes again what no
message carries any more (lost to a broker outage, or to a worker killed mid-send)."""

import logging
from datetime import timedelta

from celery import current_app
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from notifications import events, sending
from notifications.models import Channel, Delivery, DeliveryStatus, WebhookEndpoint

logger = logging.getLogger(__name__)
# A retry message may arrive a moment before the time it was scheduled for.
EARLY_SLACK = timedelta(seconds=2)
SWEEP_BATCH = 500


class Outcome:
    DELIVERED = "delivered"
    RETRY = "retry"
    GAVE_UP = "gave_up"
    SKIPPED = "skipped"
    NOT_DUE = "not_due"  # delivered, given up, leased by another worker, or not yet time


def backoff_seconds(attempts: int) -> int:
    return get_exponential_backoff_interval(
        factor=settings.QUESTLOG_NOTIFY_BACKOFF,
        retries=max(0, attempts - 1),
        maximum=settings.QUESTLOG_NOTIFY_BACKOFF_MAX,
        full_jitter=False,
    )


def _claim(delivery_id: int) -> Delivery | None:
    now = timezone.now()
    claimed = Delivery.objects.filter(
        Q(leased_until__isnull=True) | Q(leased_until__lt=now),
        pk=delivery_id,
        status=DeliveryStatus.PENDING,
        next_attempt_at__lte=now + EARLY_SLACK,
    ).update(leased_until=now + timedelta(seconds=settings.QUESTLOG_NOTIFY_LEASE))
    if claimed != 1:
        return None
    return Delivery.objects.select_related("notification", "notification__owner", "endpoint").get(pk=delivery_id)


def delivery_send(*, delivery_id: int) -> tuple[str, int]:
    """Attempt one delivery. Returns the outcome and, for RETRY, the seconds until the next try."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return Outcome.NOT_DUE, 0
    refusal = _refusal(delivery)
    if refusal:
        _finish(delivery, status=DeliveryStatus.SKIPPED, error=refusal)
        return Outcome.SKIPPED, 0
    now = timezone.now()
    delivery.attempts += 1
    delivery.first_attempt_at = delivery.first_attempt_at or now
    # Counted before sending: a worker killed mid-send still used up its attempt.
    Delivery.objects.filter(pk=delivery.pk).update(attempts=delivery.attempts, first_attempt_at=delivery.first_attempt_at)
    result = sending.send(delivery)
    if result.ok:
        _finish(delivery, status=DeliveryStatus.DELIVERED, response_status=result.status, delivered_at=timezone.now())
        return Outcome.DELIVERED, 0
    logger.info("Delivery %s failed (attempt %s): %s", delivery.message_id, delivery.attempts, result.error)
    wait = backoff_seconds(delivery.attempts)
    give_up_at = delivery.first_attempt_at + timedelta(seconds=settings.QUESTLOG_NOTIFY_GIVE_UP_AFTER)
    if timezone.now() + timedelta(seconds=wait) > give_up_at:
        _give_up(delivery, result)
        return Outcome.GAVE_UP, 0
    _finish(
        delivery, status=DeliveryStatus.PENDING, response_status=result.status, error=result.error, next_attempt_at=timezone.now() + timedelta(seconds=wait)
    )
    return Outcome.RETRY, wait


def _refusal(delivery: Delivery) -> str:
    if delivery.channel == Channel.EMAIL and not delivery.notification.owner.email:
        return "The person has no email address."
    if delivery.channel == Channel.WEBHOOK and sending.webhook_endpoint(delivery).disabled_at is not None:
        return "The endpoint is disabled."
    return ""


def _finish(delivery: Delivery, *, status: str, response_status: int | None = None, error: str = "", **fields) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(status=status, response_status=response_status, last_error=error[:500], leased_until=None, **fields)


def _give_up(delivery: Delivery, result: "sending.Result") -> None:
    with transaction.atomic():
        _finish(delivery, status=DeliveryStatus.GAVE_UP, response_status=result.status, error=result.error, next_attempt_at=None)
        if delivery.channel == Channel.WEBHOOK:
            endpoint_disable(sending.webhook_endpoint(delivery), reason=f"Failing for a day: {result.error}"[:300])


def endpoint_disable(endpoint: WebhookEndpoint, *, reason: str) -> None:
    """An endpoint that failed for a day: no more deliveries to it, and its owner hears why."""
    if WebhookEndpoint.objects.filter(pk=endpoint.pk, disabled_at__isnull=True).update(disabled_at=timezone.now(), disabled_reason=reason) != 1:
        return
    Delivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.SKIPPED, last_error="The endpoint was disabled.", leased_until=None
    )
    events.emit(
        kind="webhook.disabled",
        owner_id=endpoint.owner_id,
        dedupe_key=f"webhook.disabled:{endpoint.pk}:{timezone.now().isoformat()}",
        endpoints=[],
        email=True,
        data={
            "endpoint": {"id": endpoint.pk, "url": endpoint.url},
            "needed": "Fix the endpoint and add it again",
            "reason": reason,
            "url": events.link("/settings/notifications/"),
        },
    )


def deliveries_sweep() -> int:
    """Publish again every pending delivery that is overdue by more than a lease and not leased:
    its message was lost, or the worker that held it died. Running it twice does no harm."""
    now = timezone.now()
    overdue = now - timedelta(seconds=settings.QUESTLOG_NOTIFY_LEASE)
    ids = list(
        Delivery.objects.filter(Q(leased_until__isnull=True) | Q(leased_until__lt=now), status=DeliveryStatus.PENDING, next_attempt_at__lte=overdue)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for delivery_id in ids:
        try:
            current_app.send_task(events.DELIVERY_TASK, args=[delivery_id])
        except Exception:  # noqa: BLE001 - the broker is down: the next sweep tries again
            logger.warning("Delivery %s not published; the next sweep will retry it.", delivery_id, exc_info=True)
            break
    return len(ids)
