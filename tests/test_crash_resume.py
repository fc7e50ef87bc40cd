"""Replay tests: a scripted mission with real side effects is crashed after every single step,
resumed from the bundle, and finished. Whatever the crash point, the outside world sees each side
effect exactly once, every constraint is in every bundle, decisions and approvals are never
forgotten, and the mission ends exactly as the uninterrupted run ends.

A crash here is what a crash is in production: the agent process stops, with no stop call. The
run's heartbeat goes stale and the next run's start ends it `interrupted`."""

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from checkpoints.models import Operation, Record
from questlog_client.fake_service import Call, FakeService
from quests.models import Run
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

CONSTRAINTS = ["Never email the client before Friday", "Spend at most 5000 EUR"]
AGENT_CONSTRAINT = "Keep every booking refundable"
DEPOSIT_ACTION = "pay the 500 EUR deposit"
SIDE_EFFECT_KEYS = ["reserve-venue", "email-quote", "pay-deposit", "email-confirm"]


def receipt(external_id: str, kind: str, request: dict[str, Any]) -> dict[str, Any]:
    """What the service's answer says, as the agent stores it with the operation."""
    return {"external_id": external_id, "kind": kind, "request": request}


def call_for(service: FakeService, key: str) -> Call | None:
    """What a reconciling agent asks the service: did the call carrying this key happen?"""
    return next((call for call in service.calls() if call.ref == key), None)


class Crash(Exception):
    """The agent process died: no stop call, no goodbye."""


@dataclass
class World:
    """Everything that outlives an agent run: the external service, the crash plan, and a witness
    that remembers what was durably written so each later bundle can be checked against it."""

    service: FakeService
    crash_after: set[int]
    actions: int = 0
    crashes: int = 0
    constraints: set[str] = field(default_factory=lambda: set(CONSTRAINTS))
    decisions: set[int] = field(default_factory=set)
    approvals: dict[int, dict[str, Any]] = field(default_factory=dict)
    milestones: set[int] = field(default_factory=set)
    resolved: set[int] = field(default_factory=set)
    bundles: list[dict[str, Any]] = field(default_factory=list)
    reconciled: list[tuple[str, str]] = field(default_factory=list)

    def step(self) -> None:
        """Called after every action that reaches the API or the service: the crash points."""
        self.actions += 1
        if self.actions in self.crash_after:
            self.crashes += 1
            raise Crash(f"crashed after action {self.actions}")


def ok(response, *codes: int) -> dict[str, Any]:
    assert response.status_code in (codes or (200, 201)), (response.status_code, response.content)
    return response.json()


class AgentSession:
    """One agent process. It knows nothing but its token and the mission id: everything else it
    learns from the resume bundle — its own state from the head checkpoint, past side effects from
    the operation ledger, the person's answers from the approvals."""

    def __init__(self, agent: ApiClient, mission_id: int, world: World) -> None:
        self.agent = agent
        self.mission_id = mission_id
        self.world = world
        self.run_id: int | None = None
        self.bundle: dict[str, Any] = {}
        self.done: list[str] = []
        self.facts: dict[str, Any] = {}

    # -- what the agent does at start ------------------------------------------------------

    def start(self) -> bool:
        response = self.agent.post(f"missions/{self.mission_id}/runs", {"agent": "scripted"})
        if response.status_code == 409:
            assert response.json()["error"]["code"] == "mission_not_startable", response.content
            return False
        answer = ok(response, 201)
        self.run_id = answer["run"]["id"]
        self.bundle = answer["resume"]
        self.world.bundles.append(self.bundle)
        state = (self.bundle["checkpoint"] or {}).get("agent_state") or {}
        self.done = list(state.get("done", []))
        self.facts = dict(state.get("facts", {}))
        return True

    def reconcile(self) -> None:
        """An `attempted` operation may or may not have happened: ask the outside world, never
        repeat blindly. What did not happen is left for its step to attempt again."""
        if self.bundle["operations"]["to_reconcile"]:
            assert self.bundle["next_action"] == "reconcile", self.bundle["next_action"]
        for op in self.bundle["operations"]["to_reconcile"]:
            found = call_for(self.world.service, op["key"])
            if found is None:
                self.world.reconciled.append((op["key"], "not_done"))
                continue
            self.world.reconciled.append((op["key"], "done"))
            self._complete(op["id"], found.external_id, receipt(found.external_id, found.kind, found.payload))

    # -- the agent's building blocks -------------------------------------------------------

    def record(self, kind: str, text: str, key: str, **extra: Any) -> dict[str, Any]:
        record = ok(self.agent.post(f"runs/{self.run_id}/records", {"kind": kind, "text": text, "key": key, **extra}))
        if kind == "decision":
            self.world.decisions.add(record["id"])
        if extra.get("resolves"):
            self.world.resolved.add(extra["resolves"])
        self.world.step()
        return record

    def save(self) -> None:
        self.agent_state_checkpoint(key=f"save-{len(self.done)}")

    def agent_state_checkpoint(self, *, key: str) -> None:
        ok(self.agent.post(f"runs/{self.run_id}/checkpoints", {"agent_state": self.state(), "key": key}))
        self.world.step()

    def state(self) -> dict[str, Any]:
        return {"done": self.done, "facts": self.facts}

    def side_effect(self, *, key: str, kind: str, target: str, request: dict[str, Any]) -> dict[str, Any]:
        """Do an external side effect at most once, and return its receipt."""
        for op in self.bundle["operations"]["completed"]:
            if op["key"] == key:
                return op["receipt"]  # done by an earlier run: its stored receipt is the truth
        body = {"key": key, "kind": kind, "target": target, "request": request}
        op = ok(self.agent.post(f"runs/{self.run_id}/operations", body))
        self.world.step()
        if op["status"] == "completed":
            return op["receipt"]  # completed by this session's reconcile
        op = ok(self.agent.post(f"operations/{op['id']}/attempt"))
        self.world.step()
        # The window a crash makes dangerous: the operation is `attempted`, the call may or may
        # not reach the service. Only reconciliation against the service can tell.
        # The service does not deduplicate: a second call with the same key is a second effect.
        done = self.world.service.call(kind, target, request, ref=key, status="confirmed")
        self.world.step()
        return self._complete(op["id"], done.external_id, receipt(done.external_id, kind, request))["receipt"]

    def _complete(self, op_id: int, external_id: str, receipt: dict[str, Any]) -> dict[str, Any]:
        body = {"external_id": external_id, "external_status": "confirmed", "receipt": receipt}
        op = ok(self.agent.post(f"operations/{op_id}/complete", body), 200)
        self.world.step()
        return op

    def finish_step(self, name: str) -> None:
        self.done.append(name)

    # -- the script --------------------------------------------------------------------------

    def decide_venue(self) -> None:
        record = self.record("decision", "Book Lakeside Lodge", "decision-venue", data={"venue": "lakeside"})
        self.facts["venue_decision"] = record["id"]

    def ask_budget(self) -> None:
        question = self.record("open_question", "Is the budget 5000 or 6000 EUR?", "question-budget")
        self.facts["budget_question"] = question["id"]

    def reserve_venue(self) -> None:
        receipt = self.side_effect(key="reserve-venue", kind="booking", target="lakeside", request={"date": "2025-06-12", "people": 12})
        self.facts["booking"] = receipt["external_id"]

    def checkpoint_one(self) -> None:
        self.finish_step("checkpoint_one")  # the checkpoint itself records that it was taken
        self.save()

    def answer_budget(self) -> None:
        self.record("decision", "The budget is 5000 EUR", "decision-budget", resolves=self.facts["budget_question"])

    def add_constraint(self) -> None:
        ok(self.agent.post(f"missions/{self.mission_id}/constraints", {"text": AGENT_CONSTRAINT, "key": "constraint-refundable"}))
        self.world.constraints.add(AGENT_CONSTRAINT)
        self.world.step()

    def email_quote(self) -> None:
        self.side_effect(key="email-quote", kind="email", target="venue@lakeside.example", request={"subject": f"Quote for {self.facts['booking']}"})

    def research_milestone(self) -> None:
        body = {
            "kind": "research_complete",
            "title": "Venue researched",
            "summary": "Lakeside fits 12.",
            "evidence": [self.facts["venue_decision"]],
            "key": "milestone-research",
        }
        milestone = ok(self.agent.post(f"runs/{self.run_id}/milestones", body))
        self.world.milestones.add(milestone["id"])
        self.world.step()

    def ask_deposit(self) -> None:
        # The approval's checkpoint holds the agent's state *including* this step: once the
        # request exists, the next run must not ask again but read the person's answer.
        self.finish_step("ask_deposit")
        body = {
            "action": DEPOSIT_ACTION,
            "payload": {"amount": 500, "booking": self.facts["booking"]},
            "reason": "Paying is irreversible.",
            "agent_state": self.state(),
            "key": "approval-deposit",
        }
        approval = ok(self.agent.post(f"runs/{self.run_id}/approvals", body))
        self.world.approvals[approval["id"]] = approval
        self.world.step()
        raise WaitingForPerson

    def pay_deposit(self) -> None:
        approval = next(a for a in self.bundle["approvals"] if a["action"] == DEPOSIT_ACTION)
        assert approval["status"] in ("approved", "edited"), approval
        amount = approval["decided_payload"]["amount"]
        receipt = self.side_effect(key="pay-deposit", kind="payment", target="lakeside", request={"amount": amount, "booking": self.facts["booking"]})
        self.facts["payment"] = receipt["external_id"]

    def checkpoint_two(self) -> None:
        self.finish_step("checkpoint_two")
        self.save()

    def email_confirmation(self) -> None:
        subject = f"Booked {self.facts['booking']}, paid {self.facts['payment']}"
        self.side_effect(key="email-confirm", kind="email", target="team@example.com", request={"subject": subject})

    def plan_gate(self) -> None:
        self.finish_step("plan_gate")
        body = {
            "kind": "plan_approved",
            "title": "Offsite plan",
            "summary": "Booked and paid.",
            "gate": True,
            "agent_state": self.state(),
            "key": "milestone-plan",
        }
        milestone = ok(self.agent.post(f"runs/{self.run_id}/milestones", body))
        self.world.milestones.add(milestone["id"])
        self.world.step()
        raise WaitingForPerson

    def wrap_up(self) -> None:
        self.record("note", "Everything is booked; nothing left to do.", "note-wrap-up")

    def stop(self) -> None:
        ok(self.agent.post(f"runs/{self.run_id}/stop", {"reason": "completed", "detail": "Offsite booked"}), 200)
        self.world.step()

    SCRIPT: list[str] = [
        "decide_venue",
        "ask_budget",
        "reserve_venue",
        "checkpoint_one",
        "answer_budget",
        "add_constraint",
        "email_quote",
        "research_milestone",
        "ask_deposit",
        "pay_deposit",
        "checkpoint_two",
        "email_confirmation",
        "plan_gate",
        "wrap_up",
        "stop",
    ]

    def work(self) -> None:
        self.reconcile()
        for name in self.SCRIPT:
            if name in self.done:
                continue
            getattr(self, name)()
            if name not in self.done:
                self.done.append(name)


class WaitingForPerson(Exception):
    """The run ended waiting for a person (an approval or a gate milestone)."""


@dataclass
class Harness:
    agent: ApiClient
    person: ApiClient
    mission_id: int
    world: World
    zombies: list[int] = field(default_factory=list)
    interrupted: bool = False

    def drive(self) -> None:
        """Run agent sessions until the mission is complete; play the person when asked."""
        for _ in range(40):
            session = AgentSession(self.agent, self.mission_id, self.world)
            try:
                if session.start():
                    self.check_bundle(session.bundle, after_crash=self.interrupted)
                    self.interrupted = False
                    session.work()
            except WaitingForPerson:
                pass
            except Crash:
                self.crashed()
                continue
            status = ok(self.agent.get(f"missions/{self.mission_id}"), 200)["status"]
            if status == "completed":
                return
            if status == "waiting_for_approval":
                self.person_answers()
        raise AssertionError("the mission never completed")

    def crashed(self) -> None:
        """The agent died. Its run (if the crash left one active) goes silent until it is stale."""
        self.check_bundle(ok(self.agent.get(f"missions/{self.mission_id}/resume"), 200))
        active = Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).first()
        if active is not None:
            aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
            Run.objects.filter(pk=active.pk).update(heartbeat_at=aged)
            self.zombies.append(active.pk)
            self.interrupted = True

    def check_bundle(self, bundle: dict[str, Any], *, after_crash: bool = False) -> None:
        """What every bundle must hold, given what was durably written before it."""
        if after_crash:
            assert bundle["mission"]["stop_reason"] == "interrupted", bundle["mission"]
        self.world.bundles.append(bundle)
        texts = {c["text"] for c in bundle["constraints"]}
        assert self.world.constraints <= texts, (self.world.constraints, texts)
        decisions = {r["id"] for r in bundle["decisions"]}
        assert self.world.decisions <= decisions, (self.world.decisions, decisions)
        questions = {r["id"] for r in bundle["open_questions"]}
        assert not (questions & self.world.resolved), "a resolved question came back"
        approvals = {a["id"]: a for a in bundle["approvals"]}
        for approval_id, known in self.world.approvals.items():
            assert approval_id in approvals, "an approval was forgotten"
            assert approvals[approval_id]["status"] == known["status"], (approvals[approval_id], known)
            assert approvals[approval_id]["decided_payload"] == known["decided_payload"]
            assert approvals[approval_id]["reason"] == known["reason"]
        assert self.world.milestones <= {m["id"] for m in bundle["milestones"]}
        if bundle["operations"]["to_reconcile"] and bundle["mission"]["status"] != "running":
            assert bundle["next_action"] == "reconcile"

    def person_answers(self) -> None:
        bundle = ok(self.person.get(f"missions/{self.mission_id}/resume"), 200)
        self.check_bundle(bundle)
        assert bundle["next_action"] == "await_approval"
        for approval in bundle["approvals"]:
            if approval["status"] != "pending":
                continue
            # The agent can never decide its own request.
            assert self.agent.post(f"approvals/{approval['id']}/decision", {"decision": "approve"}).status_code == 403
            edited = {**approval["payload"], "amount": 450}
            decided = ok(self.person.post(f"approvals/{approval['id']}/decision", {"decision": "edit", "payload": edited, "note": "450 is enough"}), 200)
            assert decided["status"] == "edited"
            self.world.approvals[approval["id"]] = decided
        for milestone in bundle["milestones"]:
            if milestone["gate"] and milestone["review_status"] == "pending_review":
                ok(self.person.post(f"milestones/{milestone['id']}/review", {"action": "approve"}), 200)


def new_mission(agent: ApiClient) -> int:
    body = {
        "title": "Book the offsite",
        "objective": "Find, book and pay a venue for 12 people.",
        "constraints": CONSTRAINTS,
        "planned_milestones": [{"kind": "research_complete", "title": "Research"}, {"kind": "plan_approved", "title": "Plan"}],
    }
    return ok(agent.post("missions", body), 201)["id"]


def play(agent: ApiClient, person: ApiClient, crash_after: set[int], workdir: Path) -> tuple[Harness, dict[str, Any]]:
    mission_id = new_mission(agent)
    service = FakeService(workdir / f"service-{uuid.uuid4().hex}.sqlite3")  # a fresh outside world for each play
    harness = Harness(agent, person, mission_id, World(service, crash_after))
    harness.drive()
    return harness, final_state(agent, mission_id, harness.world.service)


def final_state(agent: ApiClient, mission_id: int, service: FakeService) -> dict[str, Any]:
    """Everything that matters about how the mission ended, as a comparable value. Attempt counts
    are left out: an attempt that crashed before reaching the service is honestly counted."""
    mission = ok(agent.get(f"missions/{mission_id}"), 200)
    bundle = ok(agent.get(f"missions/{mission_id}/resume"), 200)
    ledger = [
        {k: v for k, v in op.items() if k not in ("id", "attempts", "created_at", "updated_at", "retryable")}
        for group in bundle["operations"].values()
        for op in group
    ]
    records = sorted(Record.objects.filter(mission_id=mission_id).values_list("kind", "text", "resolved", "abandoned"))
    return {
        "mission": {k: mission[k] for k in ("status", "stop_reason", "stop_detail", "progress")},
        "next_action": bundle["next_action"],
        "agent_state": portable(bundle["checkpoint"]["agent_state"]),
        "verified": bundle["last_verified_checkpoint"] is not None,
        "constraints": sorted((c["text"], c["source"]) for c in bundle["constraints"]),
        "decisions": [r["text"] for r in bundle["decisions"]],
        "open_questions": [r["text"] for r in bundle["open_questions"]],
        "records": records,
        "milestones": [(m["kind"], m["title"], m["review_status"]) for m in bundle["milestones"]],
        "approvals": [(a["action"], a["status"], a["payload"], a["decided_payload"], a["note"]) for a in bundle["approvals"]],
        "operations": sorted(ledger, key=lambda op: op["key"]),
        "world": world(service),
        "external_ids": sorted((c.ref, c.external_id) for c in service.calls()),
    }


def world(service: FakeService) -> dict[str, list[dict[str, Any]]]:
    """The outside world as a comparable value: each key's calls, ids aside."""
    effects: dict[str, list[dict[str, Any]]] = {}
    for call in service.calls():
        effects.setdefault(call.ref, []).append({"kind": call.kind, "request": call.payload, "status": call.status})
    return effects


def portable(agent_state: dict[str, Any]) -> dict[str, Any]:
    """The agent state with record ids (which differ from mission to mission) read as texts."""
    facts = dict(agent_state["facts"])
    for name in ("venue_decision", "budget_question"):
        facts[name] = Record.objects.get(pk=facts[name]).text
    return {**agent_state, "facts": facts}


def assert_each_side_effect_once(harness: Harness) -> None:
    service = harness.world.service
    calls = Counter(call.ref for call in service.calls())
    assert dict(calls) == {key: 1 for key in SIDE_EFFECT_KEYS}, dict(calls)
    attempts = dict(Operation.objects.filter(mission_id=harness.mission_id).values_list("key", "attempts"))
    assert set(attempts) == set(SIDE_EFFECT_KEYS)
    assert all(1 <= n <= 2 for n in attempts.values()), attempts


def test_the_uninterrupted_mission_does_each_side_effect_once(agent, person, tmp_path):
    harness, final = play(agent, person, crash_after=set(), workdir=tmp_path)
    assert_each_side_effect_once(harness)
    assert harness.world.crashes == 0
    assert final["mission"]["status"] == "completed"
    assert final["next_action"] == "none"
    assert final["verified"] is True
    # The person's edit is what was paid, and the booking's receipt fed later steps.
    assert final["world"]["pay-deposit"][0]["request"]["amount"] == 450
    assert final["world"]["email-confirm"][0]["request"]["subject"] == "Booked BOOKING-00001, paid PAYMENT-00003"
    assert final["decisions"] == ["Book Lakeside Lodge", "The budget is 5000 EUR"]
    assert final["open_questions"] == []
    assert (AGENT_CONSTRAINT, "agent") in final["constraints"]
    assert Operation.objects.filter(mission_id=harness.mission_id, attempts=1).count() == len(SIDE_EFFECT_KEYS)
    assert harness.world.actions >= 10


@pytest.mark.long
def test_a_crash_after_any_step_resumes_to_the_same_end(agent, person, tmp_path):
    reference_harness, reference = play(agent, person, crash_after=set(), workdir=tmp_path)
    total = reference_harness.world.actions
    reconciled: set[str] = set()
    for k in range(1, total + 1):
        harness, final = play(agent, person, crash_after={k}, workdir=tmp_path)
        assert harness.world.crashes == 1, f"k={k}: the crash point was never reached"
        assert_each_side_effect_once(harness)
        assert final == reference, f"k={k}: the resumed mission ended differently"
        reconciled.update(outcome for _, outcome in harness.world.reconciled)
        check_zombies(agent, harness)
    # Both reconcile paths were exercised: a crash after the service call (the effect happened:
    # complete it from the service's record) and one before it (attempt again).
    assert reconciled == {"done", "not_done"}


@pytest.mark.long
def test_two_crashes_in_a_row_still_resume_to_the_same_end(agent, person, tmp_path):
    """The second crash hits the resumed run right after its first action — often in the middle
    of reconciling the first crash's unfinished operation."""
    reference_harness, reference = play(agent, person, crash_after=set(), workdir=tmp_path)
    total = reference_harness.world.actions
    for k in range(1, total + 1):
        harness, final = play(agent, person, crash_after={k, k + 1}, workdir=tmp_path)
        assert_each_side_effect_once(harness)
        assert final == reference, f"k={k}: the twice-resumed mission ended differently"


def check_zombies(agent: ApiClient, harness: Harness) -> None:
    """A crashed run that comes back to life is fenced off: its writes are refused."""
    for run_id in harness.zombies:
        run = Run.objects.get(pk=run_id)
        assert run.stop_reason == "interrupted"
        response = agent.post(f"runs/{run_id}/records", {"kind": "note", "text": "I am back"})
        assert response.status_code == 409
        assert response.json()["error"] == {**response.json()["error"], "code": "run_ended", "stop_reason": "interrupted"}
