"""Property tests: random sequences of agent and person actions, driven through the HTTP API,
with the engine's promises checked after every step:

- never two active runs on a mission (asked of the database itself);
- one operation per key, and a completed operation never changes status;
- no constraint leaves the resume bundle unless a person retired it;
- the mission status and `next_action` always agree with API.md's table and the ledger;
- no answer is ever a 500, and every error body carries `error.code`.

Each rule also predicts the answer it must get (201, 200 or which 409) from the state before the
call, so a wrong status code fails the run as surely as a broken invariant."""

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from checkpoints.models import Blob, Checkpoint, Operation, Record
from checkpoints.services import canonical_json, sha256_hex
from quests.models import Approval, Constraint, Milestone, Mission, Run
from quests.services.runs import sweep_stalled_runs
from quests.services.tokens import token_create
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

_users = itertools.count()

OP_KEYS = ["op-a", "op-b", "op-c"]
OP_REQUESTS = [{"to": "client", "n": 1}, {"to": "client", "n": 2}]
RECEIPTS = [
    {"external_id": "ext-1", "external_status": "confirmed", "receipt": {"ref": 1}},
    {"external_id": "ext-2", "external_status": "sent", "receipt": None},
]
RECORD_KINDS = ["decision", "open_question", "blocker", "dependency", "evidence", "note", "tool_output"]
RECORD_KEYS = [None, None, "rec-1", "rec-2"]
RECORD_TEXTS = ["Use Lakeside", "Ask about parking", "Vendor is down"]
STOP_REASONS = ["completed", "blocked_external", "failed_retry_budget"]
MILESTONE_KINDS = ["research_complete", "plan_approved", "draft_ready", "custom"]
PEOPLE_ONLY_PAUSE_FROM = {"ready", "running", "waiting_for_approval", "blocked"}
RESTORE_FROM = {"ready", "waiting_for_approval", "blocked", "paused", "failed"}
NOT_STARTABLE = {"waiting_for_approval", "paused", "failed", "cancelled", "completed"}
TERMINAL = {"cancelled", "completed"}

# Text PostgreSQL can store: valid UTF-8 (no lone surrogates) without NUL.
storable = st.characters(codec="utf-8", exclude_characters="\x00")

agent_states = st.dictionaries(
    st.sampled_from(["plan", "notes", "cursor", "todo"]),
    st.one_of(st.integers(-5, 5), st.text(storable, max_size=8), st.lists(st.integers(0, 3), max_size=3)),
    max_size=3,
)


# Every code point, lone surrogates and NUL included: what a buggy agent might send.
any_character = st.characters(codec=None, categories=None)


def unstorable(value: Any) -> bool:
    """Whether any string in a JSON value holds a NUL or a lone surrogate (PostgreSQL stores neither)."""
    if isinstance(value, dict):
        return any(unstorable(k) or unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(unstorable(v) for v in value)
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    return False


def expected_next_action(status: str, any_attempted: bool, *, for_new_run: bool = False) -> str:
    """API.md's table, written out again here so the service is checked against the contract,
    not against itself: the first rule that matches."""
    if status in ("completed", "cancelled"):
        return "none"
    if status in ("paused", "failed"):
        return "await_user"
    if status == "waiting_for_approval":
        return "await_approval"
    if status == "running" and not for_new_run:
        return "in_progress"
    if any_attempted:
        return "reconcile"
    if status == "blocked":
        return "retry_external"
    return "resume"


def person_client(user) -> ApiClient:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


def live(machine: "MissionMachine") -> bool:
    return machine.status not in TERMINAL


def has_run(machine: "MissionMachine") -> bool:
    """Run-scoped rules need a run: an existing one, or a mission ready to start one."""
    return bool(machine.runs) or machine.status in ("ready", "blocked")


class MissionMachine(RuleBasedStateMachine):
    """A fresh person and their agent per example, working on one mission at a time (a new one
    once the current one has ended); the rules are what either may do."""

    @initialize()
    def create_people_and_mission(self) -> None:
        user = get_user_model().objects.create_user(f"prop-{next(_users)}")
        _, raw = token_create(user=user, name="prop-agent")
        self.agent = ApiClient(Client(), raw)
        self.person = person_client(user)
        self.completed: dict[int, str] = {}  # operation id -> external_id when it completed
        self.person_retired: set[int] = set()
        self.open_mission()

    def open_mission(self) -> None:
        body = {"title": "Property quest", "objective": "Survive anything.", "constraints": ["Never email before Friday", "Stay under budget"]}
        self.mission_id = self.call(self.agent, "post", "missions", body, expect={201})["id"]
        self.status = "ready"
        self.runs: list[int] = []
        self.keyed: dict[tuple[str, str], Any] = {}
        self.op_ids: dict[str, int] = {}
        self.approvals: list[int] = []
        self.milestones: list[int] = []
        self.constraints_seen: set[int] = set(Constraint.objects.filter(mission_id=self.mission_id).values_list("pk", flat=True))

    @precondition(lambda self: not live(self))
    @rule()
    def next_mission(self) -> None:
        self.open_mission()

    # -- the HTTP calls and what any answer must look like ----------------------------------

    def call(self, client: ApiClient, method: str, path: str, body: Any = None, *, expect: set | None = None) -> Any:
        response = client.get(path) if method == "get" else getattr(client, method)(path, body)
        assert response.status_code < 500, (path, response.status_code, response.content)
        data = response.json()
        if response.status_code >= 400:
            assert isinstance(data.get("error"), dict) and data["error"].get("code"), (path, data)
            assert data["error"].get("message"), (path, data)
        if expect is not None:
            answer = response.status_code if response.status_code < 400 else (response.status_code, data["error"]["code"])
            assert answer in expect, (method, path, body, answer, data, "expected", expect)
        return data

    # -- what the rules need to know about the state before they act ------------------------

    def mission(self) -> Mission:
        return Mission.objects.get(pk=self.mission_id)

    def active_run(self) -> Run | None:
        return Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).first()

    def run_for(self, pick: int) -> Run:
        """Mostly the newest run — started first, as an agent would, when the mission is ready
        for one — and sometimes an older one (ended, or a zombie that does not know it)."""
        if pick % 4 == 0 and self.runs:
            return Run.objects.get(pk=self.runs[pick % len(self.runs)])
        if self.status in ("ready", "blocked") and self.active_run() is None:
            self.start_run("")
        return Run.objects.get(pk=self.runs[-1])

    def keyed_expect(self, scope: str, key: str | None, body: Any, run: Run, created: int = 201) -> set:
        """The answer a run-scoped creating POST must get: a replay of a known key is judged
        before fencing (even an ended run's replay answers 200)."""
        if key is not None and (scope, key) in self.keyed:
            return {200} if self.keyed[(scope, key)] == body else {(409, "key_reuse")}
        if run.ended_at is not None:
            return {(409, "run_ended")}
        return {created}

    def remember(self, scope: str, key: str | None, body: Any) -> None:
        if key is not None:
            self.keyed.setdefault((scope, key), body)

    # -- agent rules -------------------------------------------------------------------------

    @precondition(live)
    @rule(name=st.sampled_from(["", "worker"]))
    def start_run(self, name: str) -> None:
        mission, active = self.mission(), self.active_run()
        if active is not None and not active.is_stale():
            expect = {(409, "run_active")}
        elif active is not None:
            expect = {201}  # the stale run is ended `interrupted`; a running mission is ready again
        elif mission.status in NOT_STARTABLE:
            expect = {(409, "mission_not_startable")}
        else:
            expect = {201}
        data = self.call(self.agent, "post", f"missions/{self.mission_id}/runs", {"agent": name}, expect=expect)
        if "run" in data:
            self.runs.append(data["run"]["id"])
            if active is not None:
                assert Run.objects.get(pk=active.pk).stop_reason == "interrupted"
            bundle = data["resume"]
            assert bundle["mission"]["status"] == "running"
            attempted = bool(bundle["operations"]["to_reconcile"])
            assert bundle["next_action"] == expected_next_action("running", attempted, for_new_run=True)

    @precondition(has_run)
    @rule(pick=st.integers(0, 20))
    def heartbeat(self, pick: int) -> None:
        run = self.run_for(pick)
        expect = {200} if run.ended_at is None else {(409, "run_ended")}
        self.call(self.agent, "post", f"runs/{run.pk}/heartbeat", expect=expect)

    @precondition(has_run)
    @rule(
        pick=st.integers(0, 20),
        kind=st.sampled_from(RECORD_KINDS),
        text=st.sampled_from(RECORD_TEXTS),
        key=st.sampled_from(RECORD_KEYS),
        resolve=st.integers(0, 20) | st.none(),
    )
    def record(self, pick: int, kind: str, text: str, key: str | None, resolve: int | None) -> None:
        run = self.run_for(pick)
        records = list(Record.objects.filter(mission_id=self.mission_id).order_by("id").values_list("pk", "abandoned"))
        resolves = records[resolve % len(records)] if resolve is not None and records else None
        body = {"kind": kind, "text": text, "key": key, "resolves": resolves[0] if resolves else None}
        expect = self.keyed_expect("records", key, body, run)
        if expect == {201} and resolves is not None and resolves[1]:
            expect = {(422, "invalid")}  # an abandoned record cannot be resolved
        self.call(self.agent, "post", f"runs/{run.pk}/records", body, expect=expect)
        if expect == {201}:
            self.remember("records", key, body)

    @precondition(has_run)
    @rule(
        pick=st.integers(0, 20),
        text=st.text(any_character, min_size=1, max_size=30),
        data=st.dictionaries(st.text(any_character, max_size=5), st.text(any_character, max_size=5), max_size=2),
    )
    def record_with_any_text(self, pick: int, text: str, data: dict) -> None:
        """Whatever characters an agent sends, the answer is a decision, never a crash."""
        run = self.run_for(pick)
        body = {"kind": "note", "text": text, "data": data}
        if unstorable(body):
            expect = {(422, "invalid")}
        else:
            expect = {201} if run.ended_at is None else {(409, "run_ended")}
        self.call(self.agent, "post", f"runs/{run.pk}/records", body, expect=expect)

    @precondition(has_run)
    @rule(pick=st.integers(0, 20), state=agent_states, key=st.sampled_from([None, "cp-1"]))
    def checkpoint(self, pick: int, state: dict, key: str | None) -> None:
        run = self.run_for(pick)
        body = {"agent_state": state, "note": "", "key": key}
        expect = self.keyed_expect("checkpoints", key, body, run)
        data = self.call(self.agent, "post", f"runs/{run.pk}/checkpoints", body, expect=expect)
        if expect == {201}:
            self.remember("checkpoints", key, body)
            assert data["trigger"] == "agent"

    @precondition(has_run)
    @rule(pick=st.integers(0, 20), key=st.sampled_from(OP_KEYS), request=st.sampled_from(OP_REQUESTS))
    def plan_operation(self, pick: int, key: str, request: dict) -> None:
        run = self.run_for(pick)
        existing = Operation.objects.filter(mission_id=self.mission_id, key=key).first()
        if existing is not None:
            expect = {200} if existing.request == request else {(409, "key_reuse")}
        else:
            expect = {201} if run.ended_at is None else {(409, "run_ended")}
        body = {"key": key, "kind": "email", "target": "client", "request": request, "max_attempts": 2}
        data = self.call(self.agent, "post", f"runs/{run.pk}/operations", body, expect=expect)
        if expect == {201}:
            self.op_ids[key] = data["id"]
            assert data["status"] == "planned"
        elif expect == {200}:
            assert data["id"] == existing.pk and data["status"] == existing.status

    def operation(self, pick: int) -> Operation:
        return Operation.objects.get(pk=self.op_ids[sorted(self.op_ids)[pick % len(self.op_ids)]])

    @precondition(lambda self: self.op_ids)
    @rule(pick=st.integers(0, 5))
    def attempt(self, pick: int) -> None:
        self.attempt_operation(self.operation(pick))

    def attempt_operation(self, op: Operation) -> None:
        if op.status == "completed" or (op.status == "failed" and op.retryable is False):
            expect = {(409, "invalid_transition")}
        elif self.active_run() is None:
            expect = {(409, "run_ended")}
        elif op.attempts >= op.max_attempts:
            expect = {(409, "retry_budget_exhausted")}
        else:
            expect = {200}
        data = self.call(self.agent, "post", f"operations/{op.pk}/attempt", expect=expect)
        if expect == {200}:
            assert data["status"] == "attempted" and data["attempts"] == op.attempts + 1

    @precondition(has_run)
    @rule(key=st.sampled_from(OP_KEYS), then=st.sampled_from(["blocked_external", "failed_retry_budget", "completed", "crash"]))
    def side_effect_cut_short(self, key: str, then: str) -> None:
        """A common story, told in one step so that it happens often: the agent plans and attempts
        a side effect, then stops (or dies) before the receipt arrives. The mission is left with an
        operation to reconcile."""
        self.plan_operation(pick=1, key=key, request=OP_REQUESTS[0])
        if key not in self.op_ids:
            return
        self.attempt_operation(Operation.objects.get(pk=self.op_ids[key]))
        if then == "crash":
            self.go_stale()
        else:
            self.stop(pick=1, reason=then)

    @precondition(lambda self: self.op_ids)
    @rule(pick=st.integers(0, 5), which=st.integers(0, 1))
    def complete(self, pick: int, which: int) -> None:
        op = self.operation(pick)
        body = RECEIPTS[which]
        if op.status == "completed":
            expect = {200} if op.external_id == body["external_id"] else {(409, "invalid_transition")}
        else:
            expect = {200}  # a receipt is accepted whatever the run's state
        data = self.call(self.agent, "post", f"operations/{op.pk}/complete", body, expect=expect)
        if expect == {200}:
            assert data["status"] == "completed"
            self.completed.setdefault(op.pk, data["external_id"])

    @precondition(lambda self: self.op_ids)
    @rule(pick=st.integers(0, 5), retryable=st.booleans())
    def fail(self, pick: int, retryable: bool) -> None:
        op = self.operation(pick)
        expect = {(409, "invalid_transition")} if op.status == "completed" else {200}
        self.call(self.agent, "post", f"operations/{op.pk}/fail", {"error": "timeout", "retryable": retryable}, expect=expect)

    @precondition(lambda self: self.op_ids)
    @rule(pick=st.integers(0, 5), status=st.sampled_from(["confirmed", "cancelled"]))
    def observe(self, pick: int, status: str) -> None:
        op = self.operation(pick)
        data = self.call(self.agent, "post", f"operations/{op.pk}/observe", {"external_status": status}, expect={200})
        assert data["status"] == op.status, "observing never moves an operation"

    @precondition(has_run)
    @rule(pick=st.integers(0, 20), state=agent_states | st.none(), key=st.sampled_from([None, "ap-1"]))
    def request_approval(self, pick: int, state: dict | None, key: str | None) -> None:
        run = self.run_for(pick)
        body = {"action": "send the contract", "payload": {"amount": 1}, "reason": "It is binding.", "agent_state": state, "expires_at": None, "key": key}
        expect = self.keyed_expect("approvals", key, body, run)
        data = self.call(self.agent, "post", f"runs/{run.pk}/approvals", body, expect=expect)
        if expect == {201}:
            self.remember("approvals", key, body)
            self.approvals.append(data["id"])
            assert data["status"] == "pending"
            assert self.mission().status == "waiting_for_approval"
            assert Run.objects.get(pk=run.pk).stop_reason == "waiting_for_approval"

    @precondition(has_run)
    @rule(pick=st.integers(0, 20), kind=st.sampled_from(MILESTONE_KINDS), gate=st.booleans(), key=st.sampled_from([None, "ms-1"]))
    def claim_milestone(self, pick: int, kind: str, gate: bool, key: str | None) -> None:
        run = self.run_for(pick)
        body = {"kind": kind, "title": f"{kind} done", "summary": "", "evidence": [], "gate": gate, "agent_state": None, "key": key}
        expect = self.keyed_expect("milestones", key, body, run)
        data = self.call(self.agent, "post", f"runs/{run.pk}/milestones", body, expect=expect)
        if expect == {201}:
            self.remember("milestones", key, body)
            self.milestones.append(data["id"])
            assert data["review_status"] == "pending_review" and data["checkpoint_id"]
            assert self.mission().status == ("waiting_for_approval" if gate else "running")

    @precondition(has_run)
    @rule(pick=st.integers(0, 20), reason=st.sampled_from(STOP_REASONS))
    def stop(self, pick: int, reason: str) -> None:
        run = self.run_for(pick)
        expect = {200} if run.ended_at is None else {(409, "run_ended")}
        self.call(self.agent, "post", f"runs/{run.pk}/stop", {"reason": reason, "detail": "because"}, expect=expect)
        if expect == {200}:
            to = {"completed": "completed", "blocked_external": "blocked", "failed_retry_budget": "failed"}[reason]
            assert self.mission().status == to

    @rule()
    def go_stale(self) -> None:
        """The agent goes silent: its heartbeat ages past the timeout (nothing ends the run yet)."""
        aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
        Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).update(heartbeat_at=aged)

    @rule()
    def sweep(self) -> None:
        """The periodic sweep (through the service): ends stale runs `interrupted`, nothing else."""
        active = self.active_run()
        sweep_stalled_runs()
        if active is not None and active.is_stale():
            assert Run.objects.get(pk=active.pk).stop_reason == "interrupted"
        elif active is not None:
            assert Run.objects.get(pk=active.pk).ended_at is None

    @precondition(has_run)
    @rule(pick=st.integers(0, 20))
    def agent_tries_a_people_only_action(self, pick: int) -> None:
        approval = Approval.objects.filter(mission_id=self.mission_id).first()
        paths = [f"missions/{self.mission_id}/pause", f"missions/{self.mission_id}/cancel"]
        if approval is not None:
            paths.append(f"approvals/{approval.pk}/decision")
        body = {"decision": "approve"} if "approvals" in paths[pick % len(paths)] else None
        self.call(self.agent, "post", paths[pick % len(paths)], body, expect={(403, "forbidden")})

    # -- person rules ------------------------------------------------------------------------

    @precondition(lambda self: self.approvals)
    @rule(pick=st.integers(0, 20), decision=st.sampled_from(["approve", "reject", "edit"]))
    def decide_approval(self, pick: int, decision: str) -> None:
        approval = Approval.objects.get(pk=self.approvals[pick % len(self.approvals)])
        expect = {200} if approval.status == "pending" else {(409, "invalid_transition")}
        body = {"decision": decision, "payload": {"amount": 2} if decision == "edit" else None, "note": "ok"}
        data = self.call(self.person, "post", f"approvals/{approval.pk}/decision", body, expect=expect)
        if expect == {200}:
            assert data["status"] == {"approve": "approved", "reject": "rejected", "edit": "edited"}[decision]

    @precondition(lambda self: self.milestones)
    @rule(pick=st.integers(0, 20), action=st.sampled_from(["approve", "correct", "pause"]), note=st.sampled_from(["", "Use the other venue"]))
    def review_milestone(self, pick: int, action: str, note: str) -> None:
        milestone = Milestone.objects.get(pk=self.milestones[pick % len(self.milestones)])
        status = self.mission().status
        if milestone.review_status != "pending_review":
            expect = {(409, "invalid_transition")}
        elif action == "correct" and not note:
            expect = {(422, "invalid")}
        elif action == "pause" and status not in PEOPLE_ONLY_PAUSE_FROM:
            expect = {(409, "invalid_transition")}
        else:
            expect = {200}
        data = self.call(self.person, "post", f"milestones/{milestone.pk}/review", {"action": action, "note": note}, expect=expect)
        if expect == {200} and action == "pause":
            assert data["review_status"] == "pending_review" and self.mission().status == "paused"
        if expect == {200} and action == "approve" and milestone.checkpoint_id:
            assert Checkpoint.objects.get(pk=milestone.checkpoint_id).verified

    @precondition(live)
    @rule()
    def pause(self) -> None:
        expect = {200} if self.mission().status in PEOPLE_ONLY_PAUSE_FROM else {(409, "invalid_transition")}
        active = self.active_run()
        self.call(self.person, "post", f"missions/{self.mission_id}/pause", expect=expect)
        if expect == {200} and active is not None:
            assert Run.objects.get(pk=active.pk).stop_reason == "paused_by_user"

    @precondition(lambda self: self.status in ("paused", "failed", "ready"))
    @rule()
    def unpause(self) -> None:
        expect = {200} if self.mission().status in ("paused", "failed") else {(409, "invalid_transition")}
        self.call(self.person, "post", f"missions/{self.mission_id}/unpause", expect=expect)

    @precondition(live)
    @rule()
    def cancel(self) -> None:
        expect = {(409, "invalid_transition")} if self.mission().status in ("cancelled", "completed") else {200}
        self.call(self.person, "post", f"missions/{self.mission_id}/cancel", expect=expect)
        if expect == {200}:
            assert not Approval.objects.filter(mission_id=self.mission_id, status="pending").exists()

    @precondition(live)
    @rule(text=st.sampled_from(["No calls after 6pm", "Prefer trains"]))
    def add_constraint(self, text: str) -> None:
        data = self.call(self.person, "post", f"missions/{self.mission_id}/constraints", {"text": text}, expect={201})
        assert data["source"] == "user"

    @rule(pick=st.integers(0, 20))
    def retire_constraint(self, pick: int) -> None:
        """Mostly an active constraint; sometimes one that is retired already."""
        constraints = Constraint.objects.filter(mission_id=self.mission_id).order_by("id")
        if pick % 4:
            constraints = constraints.filter(retired_at__isnull=True)
        constraints = list(constraints)
        if not constraints:
            return
        constraint = constraints[pick % len(constraints)]
        expect = {200} if constraint.retired_at is None else {(409, "invalid_transition")}
        self.call(self.person, "post", f"missions/{self.mission_id}/constraints/{constraint.pk}/retire", expect=expect)
        if expect == {200}:
            self.person_retired.add(constraint.pk)

    @rule(pick=st.integers(0, 50))
    def restore(self, pick: int) -> None:
        checkpoints = list(Checkpoint.objects.filter(mission_id=self.mission_id).order_by("seq"))
        if not checkpoints:
            return
        target = checkpoints[pick % len(checkpoints)]
        allowed = self.active_run() is None and self.mission().status in RESTORE_FROM
        expect = {200} if allowed else {(409, "invalid_transition")}
        data = self.call(self.person, "post", f"missions/{self.mission_id}/restore", {"checkpoint_id": target.pk}, expect=expect)
        if expect == {200}:
            assert data["status"] == "ready"
            assert data["checkpoint"]["parent_id"] == target.pk and data["checkpoint"]["trigger"] == "restore"
            restored = self.call(self.agent, "get", f"checkpoints/{data['checkpoint']['id']}", expect={200})
            original = self.call(self.agent, "get", f"checkpoints/{target.pk}", expect={200})
            assert restored["agent_state"] == original["agent_state"]

    # -- invariants, checked after every step ----------------------------------------------

    @invariant()
    def every_promise_holds(self) -> None:
        mission = self.mission()
        self.status = mission.status
        self.never_two_active_runs()
        ledger = list(Operation.objects.filter(mission=mission).values_list("pk", "key", "status"))
        self.one_operation_per_key(ledger)
        self.completed_operations_stay_completed()
        self.status_agrees_with_runs_and_pending_work(mission)
        self.the_bundle_keeps_constraints_and_follows_the_table(mission, ledger)

    def never_two_active_runs(self) -> None:
        crowded = Run.objects.filter(ended_at__isnull=True).values("mission_id").annotate(n=Count("id")).filter(n__gt=1)
        assert not crowded.exists(), "two active runs on one mission"

    def one_operation_per_key(self, ledger: list[tuple[int, str, str]]) -> None:
        keys = [key for _, key, _ in ledger]
        assert len(keys) == len(set(keys)), keys
        assert {key: pk for pk, key, _ in ledger if key in self.op_ids} == self.op_ids

    def completed_operations_stay_completed(self) -> None:
        now = dict(Operation.objects.filter(pk__in=list(self.completed)).values_list("pk", "status"))
        assert all(status == "completed" for status in now.values()), now
        external = dict(Operation.objects.filter(pk__in=list(self.completed)).values_list("pk", "external_id"))
        assert external == self.completed

    def status_agrees_with_runs_and_pending_work(self, mission: Mission) -> None:
        active = self.active_run()
        assert (mission.status == "running") == (active is not None), (mission.status, active)
        pending = (
            Approval.objects.filter(mission=mission, status="pending").exists()
            or Milestone.objects.filter(mission=mission, gate=True, review_status="pending_review", withdrawn=False).exists()
        )
        if mission.status == "waiting_for_approval":
            assert pending, "waiting for approval with nothing pending"
        if mission.status in ("ready", "running", "blocked", "failed", "cancelled", "completed"):
            assert not pending, f"something is pending while the mission is {mission.status}"

    def the_bundle_keeps_constraints_and_follows_the_table(self, mission: Mission, ledger: list[tuple[int, str, str]]) -> None:
        bundle = self.call(self.agent, "get", f"missions/{self.mission_id}/resume", expect={200})
        constraints = dict(Constraint.objects.filter(mission=mission).values_list("pk", "retired_at"))
        in_bundle = {c["id"] for c in bundle["constraints"]}
        assert in_bundle == {pk for pk, retired_at in constraints.items() if retired_at is None}
        retired = {pk for pk, retired_at in constraints.items() if retired_at is not None}
        assert retired <= self.person_retired, "a constraint was retired without a person"
        self.constraints_seen |= set(constraints)
        assert self.constraints_seen - self.person_retired <= in_bundle, "a constraint left the bundle"
        assert bundle["mission"]["status"] == mission.status
        assert (bundle["checkpoint"] or {}).get("id") == mission.head_checkpoint_id
        attempted = any(status == "attempted" for _, _, status in ledger)
        assert bundle["next_action"] == expected_next_action(mission.status, attempted)
        assert bundle["message"]
        groups = {"completed": "completed", "to_reconcile": "attempted", "planned": "planned", "failed": "failed"}
        for group, status in groups.items():
            assert all(op["status"] == status for op in bundle["operations"][group]), group
        # The whole ledger, each operation once, as the database has it.
        in_bundle_ops = {op["id"]: op["status"] for ops in bundle["operations"].values() for op in ops}
        assert in_bundle_ops == {pk: status for pk, _, status in ledger}


@pytest.mark.long
def test_random_agent_and_person_actions_keep_every_promise():
    run_state_machine_as_test(
        MissionMachine,
        settings=hsettings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- content addressing of the agent's state --------------------------------------------------

json_leaves = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(storable, max_size=20)
json_values = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(storable, max_size=8), inner, max_size=4), max_leaves=12
)
json_states = st.dictionaries(st.text(storable, min_size=1, max_size=10), json_values, min_size=1, max_size=6)


def reordered(value: Any) -> Any:
    """The same JSON content with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


@pytest.fixture
def live_run(agent) -> dict:
    mission = agent.post("missions", {"title": "Hashing", "objective": "Hash things."}).json()
    return agent.post(f"missions/{mission['id']}/runs", {"agent": "hasher"}).json()["run"]


def write(agent: ApiClient, run_id: int, state: dict) -> dict:
    response = agent.post(f"runs/{run_id}/checkpoints", {"agent_state": state})
    assert response.status_code == 201, response.content
    return response.json()


@hsettings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(state=json_states)
def test_equal_agent_states_hash_equally_whatever_their_key_order(agent, live_run, state):
    first = write(agent, live_run["id"], state)
    again = write(agent, live_run["id"], reordered(state))
    assert first["hash"] == again["hash"]
    assert again["new_bytes"] == 0, "the same content was stored twice"
    stored = agent.get(f"checkpoints/{again['id']}").json()["agent_state"]
    assert canonical_json(stored) == canonical_json(state)


@hsettings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(state=json_states, changed=json_values, pick=st.integers(0, 10))
def test_only_changed_top_level_keys_are_stored_again(agent, live_run, state, changed, pick):
    first = write(agent, live_run["id"], state)
    key = sorted(state)[pick % len(state)]
    new_state = {**state, key: changed}
    before = set(Blob.objects.values_list("sha256", flat=True))
    second = write(agent, live_run["id"], new_state)
    added = set(Blob.objects.values_list("sha256", flat=True)) - before
    part = canonical_json(changed)
    # At most the changed part is new: every unchanged key (and the unchanged save state) is a
    # reference to a blob that already exists.
    assert added <= {sha256_hex(part)}
    assert second["new_bytes"] == (len(part) if added else 0)
    refs = {cp.pk: cp.agent_state_refs for cp in Checkpoint.objects.filter(pk__in=[first["id"], second["id"]])}
    unchanged = [k for k in state if k != key]
    assert all(refs[first["id"]][k] == refs[second["id"]][k] for k in unchanged)
    if canonical_json(state[key]) != part:
        assert first["hash"] != second["hash"]
    else:
        assert first["hash"] == second["hash"]


@hsettings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(key=st.text(any_character, min_size=1, max_size=6), value=st.text(any_character, max_size=6))
def test_any_text_in_an_agent_state_is_stored_or_refused_never_a_500(agent, live_run, key, value):
    state = {key: value, "nested": [{key: value}]}
    response = agent.post(f"runs/{live_run['id']}/checkpoints", {"agent_state": state})
    if unstorable(state):
        assert response.status_code == 422, response.content
        assert response.json()["error"]["code"] == "invalid"
    else:
        assert response.status_code == 201, response.content
        stored = agent.get(f"checkpoints/{response.json()['id']}").json()["agent_state"]
        assert stored == state
