"""Celery tasks of the outbox: each takes ids (or nothing) and calls one service. Deliveries are
`acks_late` and rejected when their worker is lost, so a message whose worker died is delivered
again; the lease and the sweep (notifications.delivery) make that safe and make it happen even
when the broker forgets the message."""

from celery import shared_task

from notifications import delivery, schedule


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True, max_retries=None)
def delivery_send_task(self, delivery_id: int) -> str:
    outcome, wait = delivery.delivery_send(delivery_id=delivery_id)
    if outcome == delivery.Outcome.RETRY:
        # Celery's retry: the same message again after the backoff the service chose (and stored).
        raise self.retry(countdown=wait)
    return outcome


@shared_task(acks_late=True, ignore_result=True)
def deliveries_sweep_task() -> int:
    return delivery.deliveries_sweep()


@shared_task(acks_late=True, ignore_result=True)
def approvals_expiring_task() -> int:
    return schedule.approvals_expiring()


@shared_task(acks_late=True, ignore_result=True)
def digests_send_task() -> int:
    return schedule.digests_send()
