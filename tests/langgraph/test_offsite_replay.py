"""The issue's check for LangGraph: the offsite graph is SIGKILLed right after every step (each
call the saver or a node made, each side effect) and resumed by a fresh process; every side effect
happens exactly once at the fake service, and no constraint, decision or approval is forgotten.
The person adds a constraint while approving, so later bundles must carry it."""

import pytest

from questlog_client.models import Bundle
from questlog_client.people import PersonSession
from questlog_client.scenarios import demo
from questlog_client.testing import Scenario, replaycheck
from quests.services.tokens import token_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]

STEP_FREE = "Everyone must have step-free access to the venue."


def constraining_person(person: PersonSession, bundle: Bundle) -> None:
    for approval in bundle.approvals:
        if approval.status == "pending":
            person.add_constraint(bundle.mission.id, STEP_FREE, key="person:step-free")
            person.decide_approval(approval.id, "approve", note="Go ahead.")


def test_the_offsite_graph_resumes_cleanly_after_a_crash_at_every_step(live_server, alice, settings):
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 1  # a killed session's heartbeat lapses within a second
    _, token = token_create(user=alice, name="replaycheck")
    scenario = Scenario("langgraph-offsite", agent="examples.langgraph_offsite:replay_agent", mission=demo.MISSION, person=constraining_person)

    report = replaycheck(scenario, base_url=live_server.url, token=token, username="alice", password="alice-password", jobs=3)

    assert report.ok, report.table() + "\n" + report.details()
    assert [row.point for row in report.rows] == list(range(1, len(report.baseline_steps) + 1))
    assert report.totals() == dict.fromkeys(("repeated_side_effects", "constraints_missing", "forgotten", "state_differences", "errors"), 0)
    assert report.baseline_effects == 2
    steps = report.baseline_steps
    assert steps[0] == "langgraph checkpoint input -1"
    assert "langgraph writes approve: __interrupt__ (asks 1 approval)" in steps
    for key in ("hold-venue", "send-invitations"):
        assert steps.index(f"operation {key}: side effect") == steps.index(f"operation {key}: attempt") + 1
    assert steps[-1] == "stop completed"


def test_a_graph_whose_node_ignores_its_stored_receipt_is_caught(live_server, alice, settings):
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 1
    _, token = token_create(user=alice, name="replaycheck")
    scenario = Scenario(
        "careless-graph", agent="tests.langgraph.careless_graph:careless_graph_agent", mission={"title": "Invite the team", "objective": "Send one invitation."}
    )

    report = replaycheck(scenario, base_url=live_server.url, token=token, username="alice", password="alice-password", jobs=3)

    assert not report.ok
    assert report.baseline_effects == 1
    repeated = {row.step for row in report.rows if row.repeated_side_effects}
    # Crashed once the email is out but before the node's writes were saved, the re-run node sends it again.
    assert {"operation send: plan", "operation send: complete"} <= repeated, report.table()
    assert not any(row.repeated_side_effects for row in report.rows if row.step.startswith("langgraph checkpoint"))
