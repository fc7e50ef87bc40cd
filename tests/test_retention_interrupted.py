"""An interrupted purge: each batch is its own transaction, so a failure in the middle of one
leaves that batch untouched, the batches before it complete, and the next run finishes the job."""

import pytest
from django.core.management import call_command

from checkpoints.models import Blob, Checkpoint, PurgeLog, RetentionPolicy
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.retention.services import purge as retention
from tests.test_retention_purge import LATER, assert_intact, assert_purged, finished_mission

# Real transactions: the batches must commit (or roll back) for real, not inside a test's one.
pytestmark = pytest.mark.django_db(transaction=True)


def every_reference_resolves() -> None:
    """No checkpoint anywhere refers to a blob that is gone."""
    for cp in Checkpoint.objects.all():
        refs = set(cp.state_refs.values()) | set(cp.agent_state_refs.values())
        assert Blob.objects.filter(sha256__in=refs).count() == len(refs)
        checkpoint_documents(cp)


def test_an_interrupted_purge_leaves_a_consistent_database_and_the_next_run_completes_it(agent, person, monkeypatch):
    first = finished_mission(agent, person, "First")
    second = finished_mission(agent, person, "Second")
    RetentionPolicy.objects.update(purge_batch_size=1)
    as_of = max(Mission.objects.get(pk=m["id"]).ended_at for m in (first, second)) + LATER

    real = retention.release_blobs
    calls = {"n": 0}

    def failing_on_the_second_batch(candidates):
        calls["n"] += 1
        if calls["n"] == 2:
            # Everything else of this batch (checkpoints, records, payloads…) is already deleted.
            raise RuntimeError("disk on fire")
        return real(candidates)

    monkeypatch.setattr(retention, "release_blobs", failing_on_the_second_batch)
    with pytest.raises(RuntimeError, match="disk on fire"):
        call_command("purge_expired", "--as-of", as_of.isoformat())

    purged = [m for m in (first, second) if Mission.objects.get(pk=m["id"]).purged_at is not None]
    untouched = [m for m in (first, second) if Mission.objects.get(pk=m["id"]).purged_at is None]
    assert len(purged) == 1 and len(untouched) == 1
    assert_purged(purged[0]["id"])
    assert_intact(untouched[0]["id"])
    every_reference_resolves()
    log = PurgeLog.objects.get()
    assert log.finished_at is None
    assert "disk on fire" in log.error
    assert log.counts["missions"] == 1, "the log counts exactly the batch that committed"

    monkeypatch.setattr(retention, "release_blobs", real)
    call_command("purge_expired", "--as-of", as_of.isoformat())
    assert_purged(untouched[0]["id"])
    every_reference_resolves()
    latest = PurgeLog.objects.order_by("-id").first()
    assert latest.finished_at is not None and latest.error == "" and latest.counts["missions"] == 1
