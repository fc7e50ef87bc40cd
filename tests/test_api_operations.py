"""The operation ledger: POST /runs/{id}/operations and /operations/{id}/attempt|complete|fail|observe."""

from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.models import Operation, OperationEvent
from quests.models import Run
from tests.test_throttle_count import cache_statements, counted_rate, database_cache  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

OPERATION_FIELDS = {
    "id",
    "key",
    "kind",
    "target",
    "status",
    "attempts",
    "max_attempts",
    "external_id",
    "external_status",
    "receipt",
    "error",
}
EMAIL = {"key": "email-client-1", "kind": "email", "target": "client@example.com", "request": {"subject": "Venue"}}


def plan(agent, run: dict, **overrides) -> dict:
    response = agent.post(f"runs/{run['id']}/operations", {**EMAIL, **overrides})
    assert response.status_code in (200, 201), response.content
    return response.json()


def attempt(agent, op: dict):
    return agent.post(f"operations/{op['id']}/attempt")


def complete(agent, op: dict, **body):
    return agent.post(f"operations/{op['id']}/complete", {"external_id": "msg-1", "external_status": "sent", **body})


def fail(agent, op: dict, retryable: bool = True):
    return agent.post(f"operations/{op['id']}/fail", {"error": "SMTP timeout", "retryable": retryable})


def test_it_plans_an_operation(agent, run):
    response = agent.post(f"runs/{run['id']}/operations", {**EMAIL, "max_attempts": 5})
    assert response.status_code == 201
    body = response.json()
    assert OPERATION_FIELDS <= set(body)
    assert (body["status"], body["attempts"], body["max_attempts"]) == ("planned", 0, 5)
    assert (body["key"], body["kind"], body["target"]) == ("email-client-1", "email", "client@example.com")


def test_max_attempts_defaults_to_three(agent, run):
    assert plan(agent, run)["max_attempts"] == 3


def test_an_operation_needs_a_key(agent, run):
    response = agent.post(f"runs/{run['id']}/operations", {k: v for k, v in EMAIL.items() if k != "key"})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "key"


@pytest.mark.parametrize("max_attempts", [0, -1, "many"])
def test_max_attempts_must_be_a_positive_number(agent, run, max_attempts):
    response = agent.post(f"runs/{run['id']}/operations", {**EMAIL, "max_attempts": max_attempts})
    assert response.status_code in (400, 422)
    assert response.json()["error"]["field"] == "max_attempts"


def test_the_same_key_and_request_answers_the_operation_with_its_current_status(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op)
    response = agent.post(f"runs/{run['id']}/operations", EMAIL)
    assert response.status_code == 200
    assert response.json()["id"] == op["id"]
    assert response.json()["status"] == "completed"
    assert Operation.objects.count() == 1


def test_a_resumed_run_learns_the_side_effect_already_happened(agent, mission, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    second = agent.post(f"missions/{mission['id']}/runs").json()["run"]
    response = agent.post(f"runs/{second['id']}/operations", EMAIL)
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["status"]) == (op["id"], "completed")


def test_the_same_key_with_another_request_is_key_reuse(agent, run):
    plan(agent, run)
    response = agent.post(f"runs/{run['id']}/operations", {**EMAIL, "request": {"subject": "Other"}})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_reuse"
    response = agent.post(f"runs/{run['id']}/operations", {**EMAIL, "target": "someone-else@example.com"})
    assert response.json()["error"]["code"] == "key_reuse"


def test_a_key_is_unique_per_mission_not_globally(agent, run):
    plan(agent, run)
    other = agent.post("missions", {"title": "Other", "objective": "O"}).json()
    other_run = agent.post(f"missions/{other['id']}/runs").json()["run"]
    response = agent.post(f"runs/{other_run['id']}/operations", EMAIL)
    assert response.status_code == 201
    assert Operation.objects.count() == 2


def test_it_goes_planned_attempted_completed(agent, run):
    op = plan(agent, run)
    response = attempt(agent, op)
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["attempts"]) == ("attempted", 1)
    response = complete(agent, op, receipt={"smtp": "250 OK"})
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["external_id"], body["external_status"], body["receipt"]) == ("completed", "msg-1", "sent", {"smtp": "250 OK"})


def test_it_goes_planned_attempted_failed_and_a_retryable_failure_may_be_attempted_again(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    response = fail(agent, op, retryable=True)
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["error"]) == ("failed", "SMTP timeout")
    response = attempt(agent, op)
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["attempts"]) == ("attempted", 2)


def test_a_failure_that_is_not_retryable_cannot_be_attempted_again(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    fail(agent, op, retryable=False)
    response = attempt(agent, op)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"


def test_attempts_past_max_attempts_are_retry_budget_exhausted(agent, run):
    op = plan(agent, run, max_attempts=2)
    for _ in range(2):
        assert attempt(agent, op).status_code == 200
        fail(agent, op)
    response = attempt(agent, op)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "retry_budget_exhausted"
    assert Operation.objects.get(pk=op["id"]).attempts == 2


def test_attempting_a_completed_operation_is_invalid_transition(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op)
    response = attempt(agent, op)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"
    assert Operation.objects.get(pk=op["id"]).attempts == 1


def test_repeating_complete_with_the_same_body_is_a_no_op(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    first = complete(agent, op, receipt={"n": 1})
    events = OperationEvent.objects.filter(operation_id=op["id"]).count()
    again = complete(agent, op, receipt={"n": 1})
    assert again.status_code == 200
    assert again.json() == first.json()
    assert OperationEvent.objects.filter(operation_id=op["id"]).count() == events


def test_completing_again_with_another_receipt_is_refused(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op)
    response = complete(agent, op, external_id="msg-2")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"
    assert Operation.objects.get(pk=op["id"]).external_id == "msg-1"


def test_a_completed_operation_cannot_be_failed(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op)
    response = fail(agent, op)
    assert response.status_code == 409
    assert Operation.objects.get(pk=op["id"]).status == "completed"


@pytest.mark.parametrize("stop_reason", ["completed", "blocked_external", "failed_retry_budget"])
def test_receipts_are_accepted_from_an_ended_run(agent, run, stop_reason):
    done, failed, observed = plan(agent, run, key="a"), plan(agent, run, key="b"), plan(agent, run, key="c")
    for op in (done, failed, observed):
        attempt(agent, op)
    complete(agent, observed)
    agent.post(f"runs/{run['id']}/stop", {"reason": stop_reason})
    assert complete(agent, done).json()["status"] == "completed"
    assert fail(agent, failed).json()["status"] == "failed"
    response = agent.post(f"operations/{observed['id']}/observe", {"external_status": "bounced"})
    assert response.status_code == 200
    assert response.json()["external_status"] == "bounced"


def test_attempt_without_an_active_run_is_run_ended(agent, run):
    op = plan(agent, run)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    response = attempt(agent, op)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_ended"
    assert response.json()["error"]["stop_reason"] == "blocked_external"
    assert Operation.objects.get(pk=op["id"]).attempts == 0


def test_attempt_works_under_the_missions_new_run(agent, mission, run):
    op = plan(agent, run)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    second = agent.post(f"missions/{mission['id']}/runs").json()["run"]
    aged = timezone.now() - timedelta(seconds=30)
    Run.objects.filter(pk=second["id"]).update(heartbeat_at=aged)
    response = attempt(agent, op)
    assert response.status_code == 200
    # The attempt is a write of the active run: it refreshes that run's heartbeat.
    assert Run.objects.get(pk=second["id"]).heartbeat_at > aged


def test_observe_keeps_the_history_of_the_external_object(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op, external_status="confirmed", receipt={"booking": "B-1"})
    response = agent.post(f"operations/{op['id']}/observe", {"external_status": "cancelled", "receipt": {"by": "venue"}})
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["external_status"], body["receipt"]) == ("completed", "cancelled", {"by": "venue"})
    history = list(OperationEvent.objects.filter(operation_id=op["id"]).values_list("event", "external_status"))
    assert ("completed", "confirmed") in history
    assert history[-1] == ("observed", "cancelled")


def test_observe_without_a_receipt_keeps_the_last_receipt(agent, run):
    op = plan(agent, run)
    attempt(agent, op)
    complete(agent, op, receipt={"booking": "B-1"})
    body = agent.post(f"operations/{op['id']}/observe", {"external_status": "confirmed"}).json()
    assert body["receipt"] == {"booking": "B-1"}


def test_the_bundle_groups_the_ledger_and_asks_to_reconcile_attempted_operations(agent, mission, run):
    planned, attempted, completed, failed = (plan(agent, run, key=k) for k in ("p", "a", "c", "f"))
    for op in (attempted, completed, failed):
        attempt(agent, op)
    complete(agent, completed)
    fail(agent, failed)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    bundle = agent.get(f"missions/{mission['id']}/resume").json()
    groups = {group: [op["key"] for op in ops] for group, ops in bundle["operations"].items()}
    assert groups == {"completed": ["c"], "to_reconcile": ["a"], "planned": ["p"], "failed": ["f"]}
    assert bundle["next_action"] == "reconcile"


def test_another_users_operation_is_not_found(agent, bob_agent, run):
    op = plan(agent, run)
    assert bob_agent.post(f"operations/{op['id']}/attempt").status_code == 404
    assert bob_agent.post(f"operations/{op['id']}/complete", {"external_id": "x", "external_status": "sent"}).status_code == 404
    assert bob_agent.post(f"operations/{op['id']}/observe", {"external_status": "x"}).status_code == 404
    assert Operation.objects.get(pk=op["id"]).status == "planned"


def test_the_bundle_of_a_new_run_asks_it_to_reconcile_first(agent, mission, run):
    op = plan(agent, run)
    attempt(agent, op)
    agent.post(f"runs/{run['id']}/stop", {"reason": "blocked_external"})
    bundle = agent.post(f"missions/{mission['id']}/runs").json()["resume"]
    assert bundle["next_action"] == "reconcile"
    assert [o["key"] for o in bundle["operations"]["to_reconcile"]] == [EMAIL["key"]]


# --- Authenticated by the lock's own statement (issue 20) -----------------------------------------
# Every operation call's first statement authenticates the agent's token, counts the request and
# locks: no round trip of its own. A token that is not valid, an operation it may not see, a plan
# past the rate: refused, and nothing is written; a receipt past the rate is still kept.


def test_the_audit_events_name_the_agent_whose_token_the_lock_authenticated(agent, mission, run):
    from quests.models import AgentToken, AuditEvent

    op = plan(agent, run)
    attempt(agent, op)
    assert complete(agent, op).status_code == 200
    token = AgentToken.objects.get(name="test-agent")
    events = AuditEvent.objects.filter(entity="operation", entity_id=str(op["id"])).order_by("id")
    assert [e.action for e in events] == ["plan", "attempt", "complete"]
    assert {(e.actor, e.actor_token_id, e.actor_user_id) for e in events} == {("agent:test-agent", token.pk, token.user_id)}


def test_a_revoked_token_is_401_for_every_operation_call_and_nothing_is_written(agent, alice, run):
    from django.utils import timezone as tz

    from quests.models import AgentToken

    op = plan(agent, run)
    AgentToken.objects.filter(user=alice).update(revoked_at=tz.now())
    calls = [
        (f"runs/{run['id']}/operations", {**EMAIL, "key": "another"}),
        (f"operations/{op['id']}/attempt", None),
        (f"operations/{op['id']}/complete", {"external_id": "m", "external_status": "sent", "receipt": {"big": "x" * 70_000}}),
        (f"operations/{op['id']}/fail", {"error": "e", "retryable": True}),
        (f"operations/{op['id']}/observe", {"external_status": "x"}),
    ]
    for path, body in calls:
        response = agent.post(path, body)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated", (path, response.content[:200])
    assert Operation.objects.filter(mission_id=run["mission_id"]).count() == 1
    assert (Operation.objects.get(pk=op["id"]).status, OperationEvent.objects.filter(operation_id=op["id"]).count()) == ("planned", 1)


def test_a_token_limited_to_another_mission_finds_no_operation(agent, alice, run):
    from django.test import Client

    from quests.models import Mission
    from quests.services.tokens import token_create
    from tests.conftest import ApiClient

    op = plan(agent, run)
    other = agent.post("missions", {"title": "Other", "objective": "Elsewhere"}).json()
    _, raw = token_create(user=alice, name="limited", mission=Mission.objects.get(pk=other["id"]))
    limited = ApiClient(Client(), raw)
    assert limited.post(f"operations/{op['id']}/attempt").status_code == 404
    assert limited.post(f"runs/{run['id']}/operations", {**EMAIL, "key": "limited"}).status_code == 404
    assert Operation.objects.get(pk=op["id"]).status == "planned"


@pytest.mark.django_db(transaction=True)
def test_the_lock_counts_the_request_a_plan_past_the_rate_writes_nothing_and_a_receipt_is_kept(agent, run, counted_rate):  # noqa: F811
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for n in range(counted_rate - 1):
        with CaptureQueriesContext(connection) as captured:
            plan(agent, run, key=f"k-{n}")
        (statement,) = cache_statements(captured)
        assert "quests_agenttoken" in statement and "checkpoints_operation" in statement
    op = Operation.objects.get(key="k-0")
    assert attempt(agent, {"id": op.pk}).status_code == 200  # the rate's last request
    refused = agent.post(f"runs/{run['id']}/operations", {**EMAIL, "key": "one-too-many"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert not Operation.objects.filter(key="one-too-many").exists()
    assert complete(agent, {"id": op.pk}).status_code == 200  # a receipt past the rate is kept
    assert Operation.objects.get(pk=op.pk).status == "completed"
