"""The purge: expired working state goes in batches, each one transaction; held state, unexpired
memory and blobs that another mission still uses stay; a purged mission stays as a tombstone."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from checkpoints.models import Blob, Checkpoint, Operation, OperationEvent, PurgeLog, Record, RetentionPolicy
from checkpoints.services import checkpoint_documents, ledger_expanded, parts_get
from quests.models import Approval, AuditEvent, Constraint, Hold, IdempotentRequest, MemoryItem, MemoryProposal, Milestone, Mission
from quests.retention.services import expiry, holds, policy, purge
from quests.services.audit import Actor
from quests.services.errors import Conflict, InvalidInput, NotFound

pytestmark = pytest.mark.django_db

LATER = timedelta(days=31)


def finished_mission(agent, person, title: str, *, secret: str = "s3cret", shared: str = "shared-output") -> dict:
    """A completed mission with every kind of working state, written through the API."""
    m = agent.post("missions", {"title": title, "objective": f"Objective {secret}", "constraints": [f"Constraint {secret}"]}).json()
    run = agent.post(f"missions/{m['id']}/runs", {"agent": "test"}).json()["run"]
    agent.post(f"runs/{run['id']}/records", {"kind": "decision", "text": f"Decision {secret}", "key": "d1"})
    agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": f"{shared} " * 200})
    agent.post(f"runs/{run['id']}/records", {"kind": "tool_output", "text": f"only {title} {secret} " * 50})
    op = agent.post(f"runs/{run['id']}/operations", {"key": "email-1", "kind": "email", "target": "client", "request": {"body": secret}}).json()
    agent.post(f"operations/{op['id']}/attempt")
    agent.post(f"operations/{op['id']}/complete", {"external_id": "m1", "external_status": "sent", "receipt": {"r": secret}})
    agent.post(f"runs/{run['id']}/milestones", {"kind": "research_complete", "title": "Research", "summary": f"Summary {secret}"})
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"shared": shared * 20, "own": f"{title} {secret}"}})
    agent.post(f"runs/{run['id']}/memory-proposals", {"name": f"pref-{title}", "value": secret, "reason": "seen twice"})
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "pay", "payload": {"card": secret}, "reason": "money"}).json()
    assert person.post(f"approvals/{approval['id']}/decision", {"decision": "approve"}).status_code == 200
    run2 = agent.post(f"missions/{m['id']}/runs", {"agent": "test"}).json()["run"]
    assert agent.post(f"runs/{run2['id']}/stop", {"reason": "completed", "detail": f"Done {secret}"}).status_code == 200
    return agent.get(f"missions/{m['id']}").json()


def blob_refs(mission_id: int) -> set[str]:
    refs: set[str] = set()
    for cp in Checkpoint.objects.filter(mission_id=mission_id):
        # The ledger's chunks too, which only its groups name (save-state format 3).
        refs |= set(cp.state_refs.values()) | set(ledger_expanded(cp.state_refs)[0].values()) | set(cp.agent_state_refs.values())
    refs |= set(Record.objects.filter(mission_id=mission_id, blob__isnull=False).values_list("blob_id", flat=True))
    return refs


def assert_intact(mission_id: int) -> None:
    """Every checkpoint of the mission still reads whole: no blob it refers to is gone."""
    assert Mission.objects.get(pk=mission_id).purged_at is None
    checkpoints = list(Checkpoint.objects.filter(mission_id=mission_id))
    assert checkpoints
    for cp in checkpoints:
        state, agent_state = checkpoint_documents(cp)
        # (The ledger is stored in chunks and read whole: each stored part must read.)
        assert set(parts_get(cp.state_refs)) == set(cp.state_refs) and "operations" in state
        assert set(agent_state) == set(cp.agent_state_refs)
    assert Blob.objects.filter(sha256__in=blob_refs(mission_id)).count() == len(blob_refs(mission_id))


def assert_purged(mission_id: int) -> None:
    m = Mission.objects.get(pk=mission_id)
    assert m.purged_at is not None
    assert m.head_checkpoint_id is None and m.objective == "" and m.stop_detail == ""
    assert not Checkpoint.objects.filter(mission_id=mission_id).exists()
    assert not Record.objects.filter(mission_id=mission_id).exists()
    assert not OperationEvent.objects.filter(operation__mission_id=mission_id).exists()
    assert not Approval.objects.filter(mission_id=mission_id).exists()
    assert not Constraint.objects.filter(mission_id=mission_id).exists()
    assert not MemoryProposal.objects.filter(mission_id=mission_id).exists()
    assert not IdempotentRequest.objects.filter(scope__startswith=f"m{mission_id}:").exists()
    for op in Operation.objects.filter(mission_id=mission_id):
        assert op.request == {} and op.receipt is None
    for ms in Milestone.objects.filter(mission_id=mission_id):
        assert ms.summary == "" and ms.checkpoint_id is None


def ended_at(mission: dict):
    return Mission.objects.get(pk=mission["id"]).ended_at


def test_a_purged_mission_stays_as_a_tombstone(agent, person):
    m = finished_mission(agent, person, "Offsite")
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    assert_purged(m["id"])

    body = agent.get(f"missions/{m['id']}").json()
    assert body["title"] == "Offsite" and body["status"] == "completed"
    assert body["created_at"] == m["created_at"] and body["ended_at"] == m["ended_at"]
    assert body["purged_at"] is not None
    assert agent.get(f"missions/{m['id']}/checkpoints").json() == {"items": []}
    assert agent.get(f"checkpoints/{m['head_checkpoint_id']}").status_code == 404
    bundle = agent.get(f"missions/{m['id']}/resume").json()
    assert bundle["checkpoint"] is None and bundle["constraints"] == [] and bundle["decisions"] == []
    # The ledger still says which side effect happened, without its payloads.
    [op] = bundle["operations"]["completed"]
    assert op["key"] == "email-1" and op["external_id"] == "m1" and op["request"] == {} and op["receipt"] is None


def test_the_purge_scrubs_what_was_written_from_the_audit_trail_but_keeps_who_did_what(agent, person):
    m = finished_mission(agent, person, "Offsite", secret="audit-secret")
    assert any("audit-secret" in str(e.data) for e in AuditEvent.objects.filter(mission_id=m["id"]))
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    events = list(AuditEvent.objects.filter(mission_id=m["id"]))
    assert not any("audit-secret" in str(e.data) for e in events)
    assert {"create", "complete", "purge"} <= {e.action for e in events}


def test_a_key_replayed_after_the_purge_is_no_server_error(agent, person):
    m = finished_mission(agent, person, "Offsite")
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    run_id = Mission.objects.get(pk=m["id"]).runs.order_by("number").first().pk
    r = agent.post(f"runs/{run_id}/records", {"kind": "decision", "text": "Decision s3cret", "key": "d1"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "run_ended"


def test_every_purge_writes_a_log_with_counts_per_kind(agent, person):
    m = finished_mission(agent, person, "Offsite")
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    log = PurgeLog.objects.get()
    assert not log.dry_run and log.trigger == "command" and log.finished_at is not None and log.error == ""
    assert log.policy == RetentionPolicy.current()
    assert log.policy_snapshot["grace_days"] == 30
    assert log.counts["missions"] == 1
    assert log.counts["checkpoints"] >= 3
    assert log.counts["records"] == 3
    assert log.counts["approvals"] == 1 and log.counts["constraints"] == 1 and log.counts["memory_proposals"] == 1
    assert log.counts["operations_scrubbed"] == 1 and log.counts["operation_events"] >= 2
    assert log.counts["blobs"] >= 1 and log.counts["blob_bytes"] > 0


def test_a_dry_run_counts_exactly_what_a_purge_deletes_and_deletes_nothing(agent, person, capsys):
    m = finished_mission(agent, person, "Offsite")
    before = (Checkpoint.objects.count(), Record.objects.count(), Blob.objects.count())
    as_of = (ended_at(m) + LATER).isoformat()
    call_command("purge_expired", "--dry-run", "--as-of", as_of)
    assert "Would delete 1 missions" in capsys.readouterr().out
    assert (Checkpoint.objects.count(), Record.objects.count(), Blob.objects.count()) == before
    assert_intact(m["id"])
    dry = PurgeLog.objects.get(dry_run=True)
    call_command("purge_expired", "--as-of", as_of)
    real = PurgeLog.objects.get(dry_run=False)
    assert dry.counts == real.counts
    assert_purged(m["id"])


def test_an_unreadable_as_of_is_a_clear_error():
    with pytest.raises(CommandError, match="ISO date-time"):
        call_command("purge_expired", "--as-of", "next tuesday")
    with pytest.raises(CommandError):
        call_command("purge_expired", "--as-of", "2027-13-45T00:00:00")
    assert not PurgeLog.objects.exists()


def test_a_date_alone_is_read_as_its_midnight(agent, person):
    m = finished_mission(agent, person, "Offsite")
    day = (ended_at(m) + LATER).date().isoformat()
    call_command("purge_expired", "--as-of", day)
    assert_purged(m["id"])


def test_shared_blobs_survive_the_purge_of_one_mission_using_them(agent, person, bob_agent, bob_person):
    gone = finished_mission(agent, person, "Alice's", shared="the same bytes")
    kept = finished_mission(bob_agent, bob_person, "Bob's", shared="the same bytes")
    shared = blob_refs(gone["id"]) & blob_refs(kept["id"])
    only_gone = blob_refs(gone["id"]) - blob_refs(kept["id"])
    assert shared and only_gone
    # Bob keeps his quest's history; Alice's expires.
    expiry.retention_keep(actor=Actor(user=Mission.objects.get(pk=kept["id"]).owner), mission_id=kept["id"])

    call_command("purge_expired", "--as-of", (ended_at(gone) + LATER).isoformat())
    assert_purged(gone["id"])
    assert_intact(kept["id"])
    assert Blob.objects.filter(sha256__in=shared).count() == len(shared)
    assert not Blob.objects.filter(sha256__in=only_gone).exists()
    r = bob_agent.get(f"checkpoints/{kept['head_checkpoint_id']}")
    assert r.status_code == 200 and r.json()["agent_state"]["shared"] == "the same bytes" * 20


def test_a_blob_an_active_mission_uses_survives_too(agent, person, run):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"shared": "shared-output" * 20}})
    active_refs = blob_refs(run["mission_id"])
    gone = finished_mission(agent, person, "Done")
    call_command("purge_expired", "--as-of", (ended_at(gone) + LATER).isoformat())
    assert_purged(gone["id"])
    assert Blob.objects.filter(sha256__in=active_refs).count() == len(active_refs)
    assert_intact(run["mission_id"])


def test_held_missions_survive_whatever_their_expiry(agent, person, alice, django_user_model):
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    m = finished_mission(agent, person, "Held")
    hold = holds.hold_place(actor=Actor(user=staff), mission_id=m["id"], reason="Legal request 42")
    call_command("purge_expired", "--as-of", (ended_at(m) + timedelta(days=3650)).isoformat())
    assert_intact(m["id"])
    with pytest.raises(Conflict):
        purge.retention_delete_now(actor=Actor(user=alice), mission_id=m["id"])

    holds.hold_release(actor=Actor(user=staff), hold_id=hold.pk)
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    assert_purged(m["id"])


def test_a_hold_on_a_user_keeps_all_their_state_and_memory(agent, person, alice, bob_agent, bob_person, django_user_model):
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    mine = finished_mission(agent, person, "Alice's")
    other = finished_mission(bob_agent, bob_person, "Bob's")
    proposal = MemoryProposal.objects.get(mission_id=mine["id"])
    person.post(f"memory-proposals/{proposal.pk}/decision", {"decision": "approve"})
    holds.hold_place(actor=Actor(user=staff), username="alice", reason="Audit of account")

    call_command("purge_expired", "--as-of", (timezone.now() + timedelta(days=3650)).isoformat())
    assert_intact(mine["id"])
    assert MemoryItem.objects.filter(owner=alice).count() == 1
    assert_purged(other["id"])


def test_unexpired_memory_survives_and_expired_memory_goes(agent, person, alice, run):
    for name in ("tone", "units"):
        p = agent.post(f"runs/{run['id']}/memory-proposals", {"name": name, "value": "x", "reason": "r"}).json()
        person.post(f"memory-proposals/{p['id']}/decision", {"decision": "approve"})
    tone, units = MemoryItem.objects.order_by("name")
    MemoryItem.objects.filter(pk=units.pk).update(expires_at=timezone.now() - timedelta(days=1))
    call_command("purge_expired")
    assert list(MemoryItem.objects.values_list("name", flat=True)) == ["tone"]
    assert PurgeLog.objects.get().counts == {"memory_items": 1}


def test_a_declined_proposal_is_deleted_with_the_missions_working_state(agent, person):
    m = finished_mission(agent, person, "Offsite")
    proposal = MemoryProposal.objects.get(mission_id=m["id"])
    assert person.post(f"memory-proposals/{proposal.pk}/decision", {"decision": "decline"}).status_code == 200
    assert MemoryProposal.objects.filter(pk=proposal.pk, status="declined").exists()
    call_command("purge_expired", "--as-of", (ended_at(m) + LATER).isoformat())
    assert not MemoryProposal.objects.filter(pk=proposal.pk).exists()
    assert not MemoryItem.objects.exists()


def test_batches_follow_the_policy_batch_size(agent, person, monkeypatch):
    missions = [finished_mission(agent, person, f"Quest {i}") for i in range(3)]
    RetentionPolicy.objects.update(purge_batch_size=2)
    as_of = max(ended_at(m) for m in missions) + LATER
    calls: list[int] = []
    real = purge.purge_missions

    def counting(ids, *, actor):
        calls.append(len(ids))
        return real(ids, actor=actor)

    monkeypatch.setattr(purge, "purge_missions", counting)
    purge.retention_purge(as_of=as_of)
    assert calls == [2, 1]
    for m in missions:
        assert_purged(m["id"])


def test_a_late_receipt_on_a_purged_mission_is_purged_on_the_next_run(agent, person):
    m = finished_mission(agent, person, "Offsite")
    as_of = ended_at(m) + LATER
    call_command("purge_expired", "--as-of", as_of.isoformat())
    op = Operation.objects.get(mission_id=m["id"])
    r = agent.post(f"operations/{op.pk}/observe", {"external_status": "refunded", "receipt": {"late": "secret"}})
    assert r.status_code == 200, r.content
    first_purged_at = Mission.objects.get(pk=m["id"]).purged_at
    call_command("purge_expired", "--as-of", as_of.isoformat())
    assert_purged(m["id"])
    assert Mission.objects.get(pk=m["id"]).purged_at == first_purged_at
    assert Operation.objects.get(pk=op.pk).external_status == "refunded"


def test_the_owner_can_delete_a_finished_mission_now_through_the_purge(agent, person, alice):
    m = finished_mission(agent, person, "Offsite")
    log = purge.retention_delete_now(actor=Actor(user=alice), mission_id=m["id"])
    assert log.trigger == "owner" and log.actor == "user:alice" and log.counts["missions"] == 1
    assert_purged(m["id"])
    with pytest.raises(Conflict):
        purge.retention_delete_now(actor=Actor(user=alice), mission_id=m["id"])


def test_only_a_finished_mission_can_be_deleted_now_and_only_by_its_owner(alice, bob, agent, mission, run):
    with pytest.raises(Conflict):
        purge.retention_delete_now(actor=Actor(user=alice), mission_id=mission["id"])
    with pytest.raises(NotFound):
        purge.retention_delete_now(actor=Actor(user=bob), mission_id=mission["id"])
    assert Mission.objects.get(pk=mission["id"]).purged_at is None
    assert not PurgeLog.objects.exists()


def test_holds_need_a_reason_and_a_target(django_user_model, mission):
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    with pytest.raises(InvalidInput):
        holds.hold_place(actor=Actor(user=staff), mission_id=mission["id"], reason="  ")
    with pytest.raises(InvalidInput):
        holds.hold_place(actor=Actor(user=staff), reason="why")
    with pytest.raises(InvalidInput):
        holds.hold_place(actor=Actor(user=staff), username="nobody", reason="why")
    assert not Hold.objects.exists()


def test_only_staff_place_holds_or_change_the_policy(alice, mission):
    with pytest.raises(NotFound):
        holds.hold_place(actor=Actor(user=alice), mission_id=mission["id"], reason="mine")
    with pytest.raises(NotFound):
        policy.retention_policy_update(actor=Actor(user=alice), grace_days=0)
    assert not Hold.objects.exists()
    assert RetentionPolicy.current().grace_days == 30
