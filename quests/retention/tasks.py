"""The periodic purge (retention issue). Like every task here it calls one service and is safe to
run twice: each batch is its own transaction and a second run finds only what the first left."""

from celery import shared_task

from quests.retention.services.purge import retention_purge


@shared_task(acks_late=True, ignore_result=True)
def purge_expired_task() -> dict[str, int]:
    return retention_purge(trigger="schedule").counts
