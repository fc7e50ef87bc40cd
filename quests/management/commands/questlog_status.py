"""`python manage.py questlog_status`: is background work keeping up?"""

import json

from django.conf import settings
from django.core.management.base import BaseCommand

from config.celery import app
from quests.services.snapshots import snapshots_status

# The queues a plain worker consumes (config/settings.py declares them).
QUEUES = tuple(queue.name for queue in settings.CELERY_TASK_QUEUES)


def queue_depths(timeout: int = 2) -> dict[str, int] | str:
    """Messages waiting in each queue, or why the broker cannot tell. Redis and the filesystem
    transport answer a passive declare with a count; a broker that is down answers nothing."""
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            return {queue: _depth(conn, queue) for queue in QUEUES}
    except Exception as exc:  # the status must print whatever the broker does
        return f"unknown ({type(exc).__name__}: {exc})"


def _depth(conn, queue: str) -> int:
    try:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except conn.channel_errors:
        # Redis knows a queue only once a worker or a publish has bound it: nothing waits there.
        return 0


class Command(BaseCommand):
    help = "Show pending snapshot requests, the oldest one's age, stalled runs and queue depths."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of text.")

    def handle(self, *args, json: bool = False, **options):
        status = snapshots_status()
        status["queues"] = queue_depths()
        if json:
            self.stdout.write(_dumps(status))
            return
        age = status["oldest_due_age_seconds"]
        lines = [
            f"Snapshot requests pending: {status['pending']} ({status['pending_due']} due, {status['pending_unpublished']} not yet published)",
            f"Oldest due request waiting: {'none' if age is None else f'{age:.0f} s'}",
            f"Snapshot requests claimed: {status['claimed']} ({status['claimed_stale']} by a worker gone silent)",
            f"Stalled runs (heartbeat too old): {status['stalled_runs']} of {status['active_runs']} active",
        ]
        queues = status["queues"]
        if isinstance(queues, dict):
            lines.append("Queue depth: " + ", ".join(f"{name} {depth}" for name, depth in queues.items()))
        else:
            lines.append(f"Queue depth: {queues}")
        self.stdout.write("\n".join(lines))


def _dumps(value: dict) -> str:
    return json.dumps(value, indent=2, default=str)
