"""Property test: no status ever changes without its audit event.

Random sequences of agent and person actions go through the services; after every step each
entity's current state (mission, run, approval, milestone — review status and withdrawal —,
operation, memory proposal) must equal the `to_state` of its latest audit event. Refusals are
part of the game: a refused action must leave no trace either."""

import itertools
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from checkpoints.models import Checkpoint, Operation
from quests.models import Approval, AuditEvent, MemoryProposal, Milestone, Mission, Run
from quests.services import approvals, machine, memory, milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.errors import ServiceError
from quests.services.tokens import token_create

pytestmark = pytest.mark.django_db

_users = itertools.count()

# entity name in the audit log -> the model whose rows carry that state
AUDITED = {
    "mission": Mission,
    "run": Run,
    "approval": Approval,
    "milestone": Milestone,
    "operation": Operation,
    "memory_proposal": MemoryProposal,
}


class AuditMachine(RuleBasedStateMachine):
    """One person and their agent per example; a new mission once the current one has ended."""

    @initialize()
    def people(self) -> None:
        user = get_user_model().objects.create_user(f"audit-prop-{next(_users)}")
        token, _ = token_create(user=user, name="audit-agent")
        self.person = Actor(user=user)
        self.agent = Actor(user=user, token=token)
        self.mission_ids: list[int] = []
        self.new_mission()

    def new_mission(self) -> None:
        mission, _ = missions.mission_create(actor=self.agent, title="Audit quest", objective="Leave a trail.")
        self.mission_ids.append(mission.pk)

    @property
    def mission_id(self) -> int:
        return self.mission_ids[-1]

    def attempt(self, service, /, **kwargs) -> None:
        """Refusals (409, 422, 404…) are expected outcomes of random actions, not failures."""
        try:
            service(**kwargs)
        except ServiceError:
            pass

    def run_id(self) -> int | None:
        """The active run, started first when the mission is ready for one."""
        active = Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).first()
        if active is None:
            self.attempt(runs.run_start, actor=self.agent, mission_id=self.mission_id, agent="prop")
            active = Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).first()
        return active.pk if active else None

    def pick(self, model, index: int):
        rows = list(model.objects.filter(mission__owner=self.person.user).order_by("id").values_list("pk", flat=True))
        return rows[index % len(rows)] if rows else None

    # -- agent ---------------------------------------------------------------------------

    @rule(reason=st.sampled_from(["completed", "blocked_external", "failed_retry_budget"]))
    def stop_run(self, reason: str) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(runs.run_stop, actor=self.agent, run_id=run_id, reason=reason, detail="because")

    @rule()
    def interrupt_stale_run(self) -> None:
        Run.objects.filter(mission_id=self.mission_id, ended_at__isnull=True).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        runs.sweep_stalled_runs()

    @rule()
    def request_approval(self) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(approvals.approval_request, actor=self.agent, run_id=run_id, action="pay", payload={"eur": 1}, reason="r")

    @rule(gate=st.booleans())
    def claim_milestone(self, gate: bool) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(milestones.milestone_claim, actor=self.agent, run_id=run_id, kind="custom", title="Step", gate=gate)

    @rule(end=st.sampled_from(["complete", "cancel"]))
    def claim_then_end(self, end: str) -> None:
        """The mission ends with a milestone still unreviewed: the case the pending rule is for."""
        run_id = self.run_id()
        if run_id:
            self.attempt(milestones.milestone_claim, actor=self.agent, run_id=run_id, kind="custom", title="Loose end")
            if end == "complete":
                self.attempt(runs.run_stop, actor=self.agent, run_id=run_id, reason="completed")
            else:
                self.attempt(missions.mission_cancel, actor=self.person, mission_id=self.mission_id)

    @rule(key=st.sampled_from(["a", "b"]))
    def plan_operation(self, key: str) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(operations.operation_plan, actor=self.agent, run_id=run_id, key=key, kind="email", target="t", request={}, max_attempts=2)

    @rule(index=st.integers(0, 9), what=st.sampled_from(["attempt", "complete", "fail", "fail_for_good", "observe"]))
    def act_on_operation(self, index: int, what: str) -> None:
        op_id = self.pick(Operation, index)
        if op_id is None:
            return
        if what == "attempt":
            self.attempt(operations.operation_attempt, actor=self.agent, operation_id=op_id)
        elif what == "complete":
            self.attempt(operations.operation_complete, actor=self.agent, operation_id=op_id, external_id="x", external_status="sent")
        elif what == "observe":
            self.attempt(operations.operation_observe, actor=self.agent, operation_id=op_id, external_status="bounced")
        else:
            self.attempt(operations.operation_fail, actor=self.agent, operation_id=op_id, error="e", retryable=what == "fail")

    @rule()
    def propose_memory(self) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(memory.memory_propose, actor=self.agent, run_id=run_id, name="diet", value="vegetarian", reason="r")

    @rule()
    def write_checkpoint(self) -> None:
        run_id = self.run_id()
        if run_id:
            self.attempt(records.checkpoint_create, actor=self.agent, run_id=run_id, agent_state={"n": 1})

    # -- person ---------------------------------------------------------------------------

    @rule(index=st.integers(0, 9), decision=st.sampled_from(["approve", "reject", "edit"]))
    def decide_approval(self, index: int, decision: str) -> None:
        approval_id = self.pick(Approval, index)
        if approval_id:
            self.attempt(approvals.approval_decide, actor=self.person, approval_id=approval_id, decision=decision, payload={"eur": 2})

    @rule(index=st.integers(0, 9))
    def let_an_approval_expire(self, index: int) -> None:
        approval_id = self.pick(Approval, index)
        if approval_id:
            Approval.objects.filter(pk=approval_id).update(respond_by=timezone.now() - timedelta(minutes=1))
            approvals.approvals_expire_due()

    @rule(index=st.integers(0, 9), action=st.sampled_from(["approve", "correct", "pause"]))
    def review_milestone(self, index: int, action: str) -> None:
        milestone_id = self.pick(Milestone, index)
        if milestone_id:
            self.attempt(milestones.milestone_review, actor=self.person, milestone_id=milestone_id, action=action, note="Use trains")

    @rule(index=st.integers(0, 9), decision=st.sampled_from(["approve", "decline"]))
    def decide_memory(self, index: int, decision: str) -> None:
        proposal_id = self.pick(MemoryProposal, index)
        if proposal_id:
            self.attempt(memory.memory_decide, actor=self.person, proposal_id=proposal_id, decision=decision)

    @rule(control=st.sampled_from(["pause", "unpause", "cancel"]))
    def control(self, control: str) -> None:
        service = {"pause": missions.mission_pause, "unpause": missions.mission_unpause, "cancel": missions.mission_cancel}
        self.attempt(service[control], actor=self.person, mission_id=self.mission_id)

    @rule(index=st.integers(0, 20))
    def restore(self, index: int) -> None:
        checkpoints = list(Checkpoint.objects.filter(mission_id=self.mission_id).order_by("seq").values_list("pk", flat=True))
        if checkpoints:
            self.attempt(missions.mission_restore, actor=self.person, mission_id=self.mission_id, checkpoint_id=checkpoints[index % len(checkpoints)])

    @rule()
    def next_mission(self) -> None:
        if Mission.objects.get(pk=self.mission_id).is_terminal:
            self.new_mission()

    # -- the promise ------------------------------------------------------------------------

    @invariant()
    def every_state_is_its_latest_audit_event(self) -> None:
        owner = self.person.user
        for entity, model in AUDITED.items():
            rows = model.objects.filter(owner=owner) if model is Mission else model.objects.filter(mission__owner=owner)
            if model is MemoryProposal:
                rows = model.objects.filter(owner=owner)
            for row in rows:
                latest = AuditEvent.objects.filter(entity=entity, entity_id=row.pk).order_by("-id").first()
                assert latest is not None, (entity, row.pk, "has no audit event")
                assert machine.state_of(row) == latest.to_state, (entity, row.pk, machine.state_of(row), latest.action, latest.to_state)


@pytest.mark.long
def test_no_status_changes_without_its_audit_event():
    run_state_machine_as_test(
        AuditMachine,
        settings=hsettings(
            max_examples=15,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
