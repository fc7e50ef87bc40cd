"""Expiry: nothing of an active quest expires; an ended one's working state expires after the
policy's grace period, or after the approved maximum when its owner chose to keep it."""

import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, OperationEvent, Record, RetentionClass, RetentionPolicy
from quests.models import Approval, Constraint, MemoryItem, MemoryProposal, Milestone, Mission
from quests.retention.services.expiry import retention_keep, retention_withdraw
from quests.services.audit import Actor
from quests.services.errors import Conflict
from tests.threads import reporting

pytestmark = pytest.mark.django_db


def purge_as_of(when) -> None:
    call_command("purge_expired", "--as-of", when.isoformat())


def work(agent, run_id: int) -> None:
    agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Use Lakeside"})
    op = agent.post(f"runs/{run_id}/operations", {"key": "email-1", "kind": "email", "target": "client", "request": {"to": "c@example.com"}}).json()
    agent.post(f"operations/{op['id']}/attempt")
    agent.post(f"operations/{op['id']}/complete", {"external_id": "m1", "external_status": "sent", "receipt": {"id": "m1"}})
    agent.post(f"runs/{run_id}/milestones", {"kind": "research_complete", "title": "Research", "summary": "Three venues"})
    agent.post(f"runs/{run_id}/checkpoints", {"agent_state": {"tmp": "/tmp/offsite", "hypothesis": "Lakeside is free"}})


def complete(agent, run_id: int) -> None:
    r = agent.post(f"runs/{run_id}/stop", {"reason": "completed", "detail": "Booked"})
    assert r.status_code == 200, r.content


def test_nothing_of_an_active_mission_expires(agent, mission, run):
    work(agent, run["id"])
    assert agent.get(f"missions/{mission['id']}").json()["expires_at"] is None
    purge_as_of(Mission.objects.get(pk=mission["id"]).created_at + timedelta(days=3650))
    body = agent.get(f"missions/{mission['id']}").json()
    assert body["purged_at"] is None
    assert len(agent.get(f"missions/{mission['id']}/checkpoints").json()["items"]) >= 1
    assert Record.objects.filter(mission_id=mission["id"]).count() == 1


def test_a_completed_mission_expires_after_the_grace_period(agent, mission, run):
    work(agent, run["id"])
    complete(agent, run["id"])
    m = Mission.objects.get(pk=mission["id"])
    assert m.ended_at is not None
    assert m.expires_at == m.ended_at + timedelta(days=30)
    assert agent.get(f"missions/{mission['id']}").json()["expires_at"] == m.expires_at.isoformat()

    purge_as_of(m.ended_at + timedelta(days=29))
    assert Mission.objects.get(pk=m.pk).purged_at is None
    assert Checkpoint.objects.filter(mission=m).exists()

    purge_as_of(m.ended_at + timedelta(days=31))
    assert Mission.objects.get(pk=m.pk).purged_at is not None
    assert not Checkpoint.objects.filter(mission=m).exists()


def test_a_cancelled_mission_expires_like_a_completed_one(agent, person, mission, run):
    work(agent, run["id"])
    assert person.post(f"missions/{mission['id']}/cancel").status_code == 200
    m = Mission.objects.get(pk=mission["id"])
    assert m.status == "cancelled"
    assert m.expires_at == m.ended_at + timedelta(days=30)


def test_the_grace_period_comes_from_the_staff_policy(agent, mission, run):
    RetentionPolicy.objects.create(grace_days=3)
    complete(agent, run["id"])
    m = Mission.objects.get(pk=mission["id"])
    assert m.expires_at == m.ended_at + timedelta(days=3)


def test_keeping_the_history_moves_expiry_to_the_approved_maximum(alice, agent, mission, run):
    work(agent, run["id"])
    complete(agent, run["id"])
    kept = retention_keep(actor=Actor(user=alice), mission_id=mission["id"])
    assert kept.retention_approved_at is not None
    assert kept.expires_at == kept.retention_approved_at + timedelta(days=365)
    body = agent.get(f"missions/{mission['id']}").json()
    assert body["retention_approved_at"] == kept.retention_approved_at.isoformat()

    purge_as_of(kept.ended_at + timedelta(days=31))
    assert Mission.objects.get(pk=kept.pk).purged_at is None
    purge_as_of(kept.retention_approved_at + timedelta(days=366))
    assert Mission.objects.get(pk=kept.pk).purged_at is not None


def test_keeping_an_active_missions_history_applies_once_it_ends(alice, agent, mission, run):
    kept = retention_keep(actor=Actor(user=alice), mission_id=mission["id"])
    assert kept.expires_at is None
    complete(agent, run["id"])
    m = Mission.objects.get(pk=mission["id"])
    assert m.expires_at == m.ended_at + timedelta(days=365)


def test_withdrawing_the_keep_choice_restores_the_grace_period(alice, agent, mission, run):
    complete(agent, run["id"])
    retention_keep(actor=Actor(user=alice), mission_id=mission["id"])
    m = retention_withdraw(actor=Actor(user=alice), mission_id=mission["id"])
    assert m.retention_approved_at is None
    assert m.expires_at == m.ended_at + timedelta(days=30)
    with pytest.raises(Conflict):
        retention_withdraw(actor=Actor(user=alice), mission_id=mission["id"])


def test_an_agent_cannot_choose_to_keep_a_history(agent, mission):
    r = agent.post(f"/missions/{mission['id']}/retention/keep/")
    # The page needs a signed-in person; an agent token is no session.
    assert r.status_code == 302
    assert Mission.objects.get(pk=mission["id"]).retention_approved_at is None


def test_every_piece_of_working_state_carries_its_missions_expiry(agent, person, mission, run, django_capture_on_commit_callbacks):
    work(agent, run["id"])
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "pay deposit", "payload": {"eur": 500}, "reason": "money"}).json()
    person.post(f"approvals/{approval['id']}/decision", {"decision": "approve"})
    run2 = agent.post(f"missions/{mission['id']}/runs", {"agent": "test"}).json()["run"]
    with django_capture_on_commit_callbacks(execute=True):
        complete(agent, run2["id"])
    m = Mission.objects.get(pk=mission["id"])
    rows = [
        *Checkpoint.objects.filter(mission=m),
        *Record.objects.filter(mission=m),
        *Operation.objects.filter(mission=m),
        *OperationEvent.objects.filter(operation__mission=m),
        *Constraint.objects.filter(mission=m),
        *Approval.objects.filter(mission=m),
        *Milestone.objects.filter(mission=m),
    ]
    assert {type(r).__name__ for r in rows} >= {"Checkpoint", "Record", "Operation", "OperationEvent", "Constraint", "Approval", "Milestone"}
    for row in rows:
        assert row.created_at is not None
        assert row.retention_class == RetentionClass.WORKING
        assert row.expires_at == m.expires_at, type(row).__name__
    # The stop checkpoint is written after the transition, in the same transaction: stamped too.
    assert Checkpoint.objects.filter(mission=m, trigger="stop").get().expires_at == m.expires_at


def test_memory_items_are_long_term_and_expire_on_their_own_clock(alice, agent, person, mission, run):
    proposal = agent.post(f"runs/{run['id']}/memory-proposals", {"name": "tone", "value": "formal", "reason": "asked twice"}).json()
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    item = MemoryItem.objects.get(owner=alice)
    assert item.retention_class == RetentionClass.LONG_TERM
    assert item.retention_approved_at is not None
    assert item.expires_at == item.approved_at + timedelta(days=365)

    complete(agent, run["id"])
    m = Mission.objects.get(pk=mission["id"])
    purge_as_of(m.ended_at + timedelta(days=31))
    assert Mission.objects.get(pk=m.pk).purged_at is not None
    assert MemoryItem.objects.filter(pk=item.pk).exists(), "unexpired long-term memory survives its mission's purge"

    purge_as_of(item.expires_at + timedelta(seconds=1))
    assert not MemoryItem.objects.filter(pk=item.pk).exists()


def test_the_stamping_statement_covers_every_table_of_working_state():
    # The one list of what holds working state is WORKING_STATE; the engine's statement spells
    # the tables out, so a table added to the list and not to the statement fails here.
    from quests.engine.sql.lifecycle import STAMP_WORKING_STATE_PG
    from quests.retention.services.expiry import WORKING_STATE

    for model, _ in WORKING_STATE:
        assert f"UPDATE {model._meta.db_table} AS t" in STAMP_WORKING_STATE_PG, model.__name__


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite serialises writers with one database lock, so there are no row locks whose order could deadlock (the suite runs on PostgreSQL: this never skips in make test)",
)
def test_stamping_waits_for_a_writer_that_holds_the_mission_and_never_deadlocks_with_it(agent, mission, run):
    """A writer locks the mission, then changes a checkpoint row and a record row; the stamping
    starts while it holds the lock. Had the stamping taken the rows before the mission, the writer
    and it would each wait for the other (a deadlock PostgreSQL breaks with an error). It waits
    for the writer, then stamps every row, the writer's changes included."""
    from quests.retention.services import expiry

    work(agent, run["id"])
    complete(agent, run["id"])
    mission_id = mission["id"]
    Mission.objects.filter(pk=mission_id).update(expires_at=None)
    writer_has_lock, stamped, failures = threading.Event(), threading.Event(), []

    def writer() -> None:
        with transaction.atomic():
            Mission.objects.select_for_update().get(pk=mission_id)
            writer_has_lock.set()
            time.sleep(0.5)  # the stamping has started meanwhile and waits on the mission
            assert not stamped.is_set()
            Record.objects.filter(mission_id=mission_id).update(text="changed under the lock")
            Checkpoint.objects.filter(mission_id=mission_id).update(note="changed under the lock")
            Mission.objects.filter(pk=mission_id).update(expires_at=timezone.now() + timedelta(days=3))

    def stamper() -> None:
        writer_has_lock.wait(5)
        expiry._stamp_rows(mission_id)
        stamped.set()

    threads = [threading.Thread(target=reporting(failures, writer)), threading.Thread(target=reporting(failures, stamper))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert failures == []
    expires_at = Mission.objects.get(pk=mission_id).expires_at
    assert expires_at is not None
    for model, path in expiry.WORKING_STATE:
        rows = model._default_manager.filter(**{path: mission_id}, retention_class=RetentionClass.WORKING)
        assert rows.exists() or model in (Approval, MemoryProposal), model.__name__  # work() asks for neither
        assert not rows.exclude(expires_at=expires_at).exists(), model.__name__
