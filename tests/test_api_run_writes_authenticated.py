"""The run's other agent writes (an approval request, a batch of them, a milestone claim, a memory
proposal, a stop) authenticate an agent token in the statement that locks the run, as a record
does: one statement for both, 401 for a token that is not valid and 404 for a run the token may
not see, with nothing written either way, and audit events that name the agent."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quests.models import AgentToken, Approval, AuditEvent, MemoryProposal, Milestone, Mission, Run

WRITES = {
    "approval request": ("approvals", {"action": "send_email", "payload": {"to": "venue"}, "reason": "outside supplier"}),
    "approval batch": ("approvals/batch", {"items": [{"action": "pay", "payload": {}, "reason": "a deposit"}]}),
    "milestone claim": ("milestones", {"kind": "research_complete", "title": "Venues found"}),
    "memory proposal": ("memory-proposals", {"name": "diet", "value": "vegetarian", "reason": "said so"}),
    "stop": ("stop", {"reason": "blocked_external", "detail": "CRM down"}),
}


def written(mission_id: int) -> tuple:
    """What any of the writes would leave behind."""
    return (
        Approval.objects.filter(mission_id=mission_id).count(),
        Milestone.objects.filter(mission_id=mission_id).count(),
        MemoryProposal.objects.filter(mission_id=mission_id).count(),
        AuditEvent.objects.filter(mission_id=mission_id).count(),
        Run.objects.filter(mission_id=mission_id, ended_at__isnull=False).count(),
    )


@pytest.mark.parametrize("write", WRITES)
def test_the_lock_authenticates_the_token_in_one_statement_and_the_audit_names_the_agent(agent, mission, run, write):
    path, body = WRITES[write]
    with CaptureQueriesContext(connection) as captured:
        answer = agent.post(f"runs/{run['id']}/{path}", body)
    assert answer.status_code in (200, 201), answer.content
    tokens = [q["sql"] for q in captured.captured_queries if "quests_agenttoken" in q["sql"]]
    assert len(tokens) == 1 and "quests_run" in tokens[0]  # one statement authenticates and locks
    newest = AuditEvent.objects.filter(mission_id=mission["id"]).latest("pk")
    assert newest.actor_token_id == AgentToken.objects.get(name="test-agent").pk and "test-agent" in newest.actor


@pytest.mark.parametrize("write", WRITES)
def test_a_revoked_token_is_401_and_nothing_is_written(agent, mission, run, write):
    path, body = WRITES[write]
    before = written(mission["id"])
    AgentToken.objects.update(revoked_at=timezone.now())
    answer = agent.post(f"runs/{run['id']}/{path}", body)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthenticated"
    assert written(mission["id"]) == before


@pytest.mark.parametrize("write", WRITES)
def test_a_token_of_another_person_or_mission_finds_no_run(agent, alice, bob_agent, mission, run, write):
    from django.test import Client

    from quests.services.tokens import token_create
    from tests.conftest import ApiClient

    other = agent.post("missions", {"title": "Other", "objective": "Elsewhere"}).json()
    _, raw = token_create(user=alice, name="limited", mission=Mission.objects.get(pk=other["id"]))
    path, body = WRITES[write]
    before = written(mission["id"])
    for caller in (ApiClient(Client(), raw), bob_agent):
        answer = caller.post(f"runs/{run['id']}/{path}", body)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert written(mission["id"]) == before


@pytest.mark.parametrize("write", WRITES)
def test_an_invalid_body_with_a_token_that_is_not_valid_is_401(client, run, write):
    path, _ = WRITES[write]
    answer = client.post(f"/api/v1/runs/{run['id']}/{path}", {"nonsense": True}, content_type="application/json", HTTP_AUTHORIZATION="Bearer qlt_made_up")
    assert answer.status_code == 401
