"""The periodic purge task: registered with Celery, scheduled by beat, calls the purge service."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from checkpoints.models import PurgeLog
from config.celery import app
from quests.models import Mission
from quests.retention.tasks import purge_expired_task

pytestmark = pytest.mark.django_db


def test_celery_finds_the_task_and_beat_schedules_it():
    app.loader.import_default_modules()
    assert "quests.retention.tasks.purge_expired_task" in app.tasks
    entry = settings.CELERY_BEAT_SCHEDULE["purge-expired"]
    assert entry["task"] == "quests.retention.tasks.purge_expired_task"


def test_the_task_purges_what_has_expired_and_logs_it(agent):
    m = agent.post("missions", {"title": "T", "objective": "x"}).json()
    run = agent.post(f"missions/{m['id']}/runs", {}).json()["run"]
    agent.post(f"runs/{run['id']}/stop", {"reason": "completed"})
    Mission.objects.filter(pk=m["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    counts = purge_expired_task.apply().get()
    assert counts["missions"] == 1
    assert Mission.objects.get(pk=m["id"]).purged_at is not None
    log = PurgeLog.objects.get()
    assert log.trigger == "schedule" and log.actor == "system:questlog"
    # Running it again is harmless: nothing is left to do.
    assert purge_expired_task.apply().get() == {}
