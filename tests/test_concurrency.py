"""Races, run for real: threads with their own database connections against PostgreSQL, released
together by a barrier so the requests truly overlap. No mocks: the guarantees come from row locks
and unique constraints, so only a real database can prove them."""

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, OperationEvent, Record
from checkpoints.services import state_get
from quests.models import Approval, AuditEvent, Constraint, Mission, Run
from quests.services import savestate
from tests.conftest import ApiClient
from tests.test_properties_savestate import current_refs, full_refs

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Answer:
    status: int
    body: dict[str, Any]

    @property
    def code(self) -> str | None:
        # Only error answers have a code (an operation's own `error` field is a plain string).
        return self.body["error"]["code"] if self.status >= 400 else None


def race(clients: list[ApiClient], call: Callable[[ApiClient, int], Any]) -> list[Answer]:
    """Fire `call` from one thread per client, all at once. Each thread has its own Django test
    Client (they are not thread-safe) and its own database connection, closed when it is done."""
    barrier = threading.Barrier(len(clients), timeout=30)
    answers: list[Answer | None] = [None] * len(clients)
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            response = call(clients[i], i)
            answers[i] = Answer(response.status_code, response.json())
        except BaseException as exc:  # a 500 surfaces here: the test client re-raises it
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racing request never finished"
    assert not failures, failures
    for answer in answers:
        assert answer is not None
        assert answer.status < 500, answer
        if answer.status >= 400:
            assert answer.code, answer
    return answers  # type: ignore[return-value]


def agents_like(agent: ApiClient, n: int) -> list[ApiClient]:
    """n separate HTTP clients presenting the same bearer token, like n workers of one agent."""
    clients = []
    for _ in range(n):
        client = ApiClient(Client())
        client.headers = dict(agent.headers)
        clients.append(client)
    return clients


def person_session(user) -> ApiClient:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


def statuses(answers: list[Answer]) -> Counter:
    return Counter((a.status, a.code) for a in answers)


def test_twenty_identical_operation_posts_create_one_operation(agent, mission, run):
    body = {"key": "book-venue", "kind": "booking", "target": "lakeside", "request": {"date": "2025-06-12"}}
    answers = race(agents_like(agent, 20), lambda c, i: c.post(f"runs/{run['id']}/operations", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 19})
    assert len({a.body["id"] for a in answers}) == 1
    assert all(a.body["status"] == "planned" for a in answers)
    assert Operation.objects.filter(mission_id=mission["id"], key="book-venue").count() == 1
    assert AuditEvent.objects.filter(entity="operation", action="plan").count() == 1


def test_ten_run_starts_start_exactly_one_run(agent, mission):
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"missions/{mission['id']}/runs", {"agent": f"worker-{i}"}))
    assert statuses(answers) == Counter({(201, None): 1, (409, "run_active"): 9})
    assert Run.objects.filter(mission_id=mission["id"]).count() == 1
    assert Run.objects.filter(mission_id=mission["id"], ended_at__isnull=True).count() == 1
    assert Mission.objects.get(pk=mission["id"]).status == "running"


def test_ten_run_starts_over_a_stale_run_end_it_once_and_start_one(agent, mission, run):
    aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
    Run.objects.filter(pk=run["id"]).update(heartbeat_at=aged)
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"missions/{mission['id']}/runs", {"agent": f"worker-{i}"}))
    assert statuses(answers) == Counter({(201, None): 1, (409, "run_active"): 9})
    stale = Run.objects.get(pk=run["id"])
    assert stale.stop_reason == "interrupted"
    assert Run.objects.filter(mission_id=mission["id"]).count() == 2
    assert Run.objects.filter(mission_id=mission["id"], ended_at__isnull=True).count() == 1
    assert AuditEvent.objects.filter(entity="run", entity_id=run["id"], action="end").count() == 1


def test_two_people_deciding_one_approval_at_once_one_wins(agent, alice, mission, run):
    body = {"action": "pay the deposit", "payload": {"amount": 500}, "reason": "Money leaves the account."}
    approval = agent.post(f"runs/{run['id']}/approvals", body).json()
    people = [person_session(alice), person_session(alice)]
    decisions = [{"decision": "approve", "note": "fine"}, {"decision": "reject", "note": "too much"}]
    answers = race(people, lambda c, i: c.post(f"approvals/{approval['id']}/decision", decisions[i]))
    assert sorted(a.status for a in answers) == [200, 409]
    winner = next(a for a in answers if a.status == 200)
    loser = next(a for a in answers if a.status == 409)
    assert loser.code == "invalid_transition"
    decided = Approval.objects.get(pk=approval["id"])
    assert decided.status == winner.body["status"]
    assert AuditEvent.objects.filter(entity="approval", entity_id=approval["id"], action__in=["approve", "reject"]).count() == 1
    assert Mission.objects.get(pk=mission["id"]).status == "ready"


def test_concurrent_checkpoint_writes_get_distinct_consecutive_seqs(agent, mission, run):
    before = Mission.objects.get(pk=mission["id"]).next_checkpoint_seq
    answers = race(agents_like(agent, 12), lambda c, i: c.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"worker": i}}))
    assert statuses(answers) == Counter({(201, None): 12})
    seqs = sorted(a.body["seq"] for a in answers)
    assert seqs == list(range(before, before + 12))
    stored = Checkpoint.objects.filter(mission_id=mission["id"], trigger="agent")
    assert sorted(stored.values_list("seq", flat=True)) == seqs
    # Each parent is the checkpoint written just before it: the writes were serialised, not lost.
    by_seq = {cp.seq: cp for cp in stored}
    assert all(by_seq[s].parent_id == by_seq[s - 1].pk for s in seqs[1:])


def test_concurrent_missions_with_one_key_create_one_mission(agent, alice):
    body = {"title": "Plan the launch", "objective": "Ship it.", "constraints": ["No launches on Friday"], "key": "launch-1"}
    answers = race(agents_like(agent, 10), lambda c, i: c.post("missions", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 9})
    assert len({a.body["id"] for a in answers}) == 1
    assert Mission.objects.filter(owner=alice, title="Plan the launch").count() == 1
    assert Constraint.objects.filter(mission_id=answers[0].body["id"]).count() == 1


def test_concurrent_records_with_one_key_create_one_record(agent, mission, run):
    body = {"kind": "decision", "text": "Use Lakeside", "key": "decision-venue"}
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"runs/{run['id']}/records", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 9})
    assert len({a.body["id"] for a in answers}) == 1
    assert Record.objects.filter(mission_id=mission["id"], text="Use Lakeside").count() == 1


def test_concurrent_approval_requests_with_one_key_ask_once(agent, mission, run):
    """The key is remembered with the approval's save (one statement): the twins that lose on it
    answer the approval the first made."""
    body = {"action": "send_email", "payload": {"to": "venue"}, "reason": "outside supplier", "key": "ask-venue"}
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"runs/{run['id']}/approvals", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 9})
    assert len({a.body["id"] for a in answers}) == 1
    assert Approval.objects.filter(mission_id=mission["id"]).count() == 1


def test_a_new_key_on_a_run_that_really_ended_is_still_refused(agent, mission, run):
    """The policy's second try reads the key afresh; a run ended by a stop, not by the key's own
    first request, is refused again, and nothing is written."""
    assert agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external", "detail": "CRM down"}).status_code == 200
    refused = agent.post(f"runs/{run['id']}/approvals", {"action": "send_email", "payload": {}, "reason": "r", "key": "after-stop"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_ended"
    assert not Approval.objects.filter(mission_id=mission["id"]).exists()


def test_concurrent_milestone_claims_with_one_key_claim_once(agent, mission, run):
    from quests.models import Milestone

    body = {"kind": "research_complete", "title": "Venues found", "gate": True, "key": "claim-research"}
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"runs/{run['id']}/milestones", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 9})
    assert Milestone.objects.filter(mission_id=mission["id"], title="Venues found").count() == 1


def test_concurrent_constraints_with_one_key_create_one_constraint(agent, mission):
    body = {"text": "Keep it refundable", "key": "refundable"}
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"missions/{mission['id']}/constraints", body))
    assert statuses(answers) == Counter({(201, None): 1, (200, None): 9})
    assert Constraint.objects.filter(mission_id=mission["id"], text="Keep it refundable").count() == 1


def test_concurrent_attempts_never_exceed_the_retry_budget(agent, mission, run):
    body = {"key": "send-invoice", "kind": "email", "target": "client", "request": {"n": 1}, "max_attempts": 3}
    op = agent.post(f"runs/{run['id']}/operations", body).json()
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"operations/{op['id']}/attempt"))
    assert statuses(answers) == Counter({(200, None): 3, (409, "retry_budget_exhausted"): 7})
    assert Operation.objects.get(pk=op["id"]).attempts == 3


def test_concurrent_identical_receipts_complete_an_operation_once(agent, mission, run):
    body = {"key": "book", "kind": "booking", "target": "lakeside", "request": {}}
    op = agent.post(f"runs/{run['id']}/operations", body).json()
    agent.post(f"operations/{op['id']}/attempt")
    receipt = {"external_id": "bk-1", "external_status": "confirmed", "receipt": {"ref": "bk-1"}}
    answers = race(agents_like(agent, 10), lambda c, i: c.post(f"operations/{op['id']}/complete", receipt))
    assert statuses(answers) == Counter({(200, None): 10})
    assert all(a.body["status"] == "completed" and a.body["external_id"] == "bk-1" for a in answers)
    assert OperationEvent.objects.filter(operation_id=op["id"], event="completed").count() == 1


def test_a_pause_racing_run_writes_leaves_no_write_after_the_pause(agent, alice, mission, run):
    """A person pauses while the agent writes: every write either landed before the pause or
    was refused `run_ended`; none slips in after the run ended."""
    clients = agents_like(agent, 8) + [person_session(alice)]

    def call(client: ApiClient, i: int):
        if i == 8:
            return client.post(f"missions/{mission['id']}/pause")
        return client.post(f"runs/{run['id']}/records", {"kind": "note", "text": f"note {i}"})

    answers = race(clients, call)
    assert answers[8].status == 200
    writes = answers[:8]
    assert all(a.status == 201 or (a.status == 409 and a.code == "run_ended") for a in writes), writes
    ended = Run.objects.get(pk=run["id"])
    assert ended.stop_reason == "paused_by_user"
    landed = Record.objects.filter(mission_id=mission["id"], kind="note")
    assert landed.count() == sum(a.status == 201 for a in writes)
    assert all(r.created_at <= ended.ended_at for r in landed)


def test_concurrent_receipts_and_plans_on_one_ledger_keep_the_save_state_the_full_rebuild(agent, mission, run):
    """Each operation call locks the mission and reads the ledger chunk it rewrites in one
    statement; one that waited for the lock re-reads under it. Ten receipts for ten operations of
    one chunk, and ten plans with ten keys, all at once: the current document is still exactly
    the full rebuild, and every change is in it."""
    ops = [agent.post(f"runs/{run['id']}/operations", {"key": f"k{n}", "kind": "mail", "target": "t", "request": {"n": n}}).json() for n in range(10)]
    for op in ops:
        assert agent.post(f"operations/{op['id']}/attempt").status_code == 200

    def receipt_or_plan(client: ApiClient, i: int) -> Any:
        if i < 10:
            return client.post(f"operations/{ops[i]['id']}/complete", {"external_id": f"X{i}", "external_status": "sent"})
        return client.post(f"runs/{run['id']}/operations", {"key": f"new{i}", "kind": "mail", "target": "t", "request": {"n": i}})

    answers = race(agents_like(agent, 20), receipt_or_plan)
    assert statuses(answers) == Counter({(200, None): 10, (201, None): 10})
    stored = Mission.objects.get(pk=mission["id"])
    assert current_refs(stored) == full_refs(stored)
    ledger = state_get(savestate.current_document(stored)[0])["operations"]  # as stored, its groups and chunks read
    assert sorted((o["key"], o["status"]) for o in ledger) == sorted(
        [(f"k{n}", "completed") for n in range(10)] + [(f"new{i}", "planned") for i in range(10, 20)]
    )
