"""Every SDK human-in-the-loop scenario (tests/openai_agents_scenarios.py) behaves the same through
`RunStateStore` as in memory: the same final output (what the model was told), the same tool
executions and the same number of decisions a person makes, whether each round is loaded in a
fresh process or in the same long-lived one (one agent object and one store for every round)."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.models import Operation
from questlog_client.openai_agents import RunStateStore
from questlog_client.openai_agents.tools import APPROVED
from questlog_client.people import PersonSession
from tests.openai_agents_scenarios import SCENARIOS, Scenario, executions, in_memory, store_round
from tests.test_openai_agents import alice_in_browser as person, token  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "openai_agents_scenarios.py"
MAX_ROUNDS = 6


def decide_pending(person: PersonSession, scenario: Scenario, mission_id: int) -> int:
    """The person decides every question waiting in the mission, as the scenario says."""
    pending = [a for a in person.resume(mission_id).approvals if a.status == "pending"]
    for approval in pending:
        decision = scenario.decide(approval.action, approval.payload)
        person.decide_approval(approval.id, decision.verb, note=decision.note, always=decision.always)
    return len(pending)


def fresh_round(url: str, token: str, scenario: Scenario, log: Path, mission_id: int | None) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), url, token, scenario.name, str(log), "-" if mission_id is None else str(mission_id)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def through_the_store(url: str, token: str, person: PersonSession, scenario: Scenario, log: Path, *, fresh: bool) -> dict:
    store = RunStateStore(url, token, takeover_timeout=30, heartbeat_interval=0.5)
    agent = scenario.build(log)  # the long-lived worker's one agent object, for every round
    decisions, mission_id = 0, None
    try:
        for _ in range(MAX_ROUNDS):
            if fresh:
                outcome = fresh_round(url, token, scenario, log, mission_id)
            else:
                outcome = asyncio.run(store_round(store, scenario, log, mission_id, agent))
            mission_id = outcome["mission_id"]
            if not outcome["waiting"]:
                ended = {"error": outcome["error"]} if "error" in outcome else {"final": outcome["final"]}
                return {**ended, "executions": executions(log), "decisions": decisions}
            decisions += decide_pending(person, scenario, mission_id)
    finally:
        asyncio.run(store.close())
    raise AssertionError(f"{scenario.name} still waits after {MAX_ROUNDS} rounds")


@pytest.mark.parametrize("where", ["fresh process", "same process"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_sdk_scenario_behaves_as_in_memory(live_server, token, person, tmp_path, name, where):
    scenario = SCENARIOS[name]
    expected = asyncio.run(in_memory(scenario, tmp_path / "in-memory.jsonl"))
    actual = through_the_store(live_server.url, token, person, scenario, tmp_path / "store.jsonl", fresh=where == "fresh process")
    assert actual == expected


def test_a_revoked_always_is_forgotten_and_every_later_call_is_asked_again(live_server, token, person, tmp_path):
    scenario = SCENARIOS["always_approve"]
    log = tmp_path / "store.jsonl"
    first = fresh_round(live_server.url, token, scenario, log, None)
    [approval] = [a for a in person.resume(first["mission_id"]).approvals if a.status == "pending"]
    person.decide_approval(approval.id, "approve", always=True)
    [standing] = person.resume(first["mission_id"]).standing_decisions
    person.revoke_standing_decision(first["mission_id"], standing.id)

    # The first call runs (it was approved); the SDK's "always" is dropped, so the next call asks.
    second = fresh_round(live_server.url, token, scenario, log, first["mission_id"])
    assert second["waiting"] and [e["arguments"]["target"] for e in executions(log)] == ["team"]
    pending = [a for a in person.resume(first["mission_id"]).approvals if a.status == "pending"]
    assert [(a.action, a.payload) for a in pending] == [("send_email", {"target": "boss"})]


def test_an_agent_tool_is_no_ledger_entry_and_its_agents_tool_runs_once_through_the_ledger(live_server, token, person, tmp_path):
    scenario = SCENARIOS["agent_tool_needs_approval_and_nested"]
    outcome = through_the_store(live_server.url, token, person, scenario, tmp_path / "store.jsonl", fresh=False)
    assert outcome["decisions"] == 2 and len(outcome["executions"]) == 1
    ledger = Operation.objects.get()
    assert (ledger.key, ledger.target, ledger.status, ledger.receipt) == (
        "openai-agents:inner_1",
        "send_email",
        "completed",
        {"output": "send_email done for team"},
    )
    assert APPROVED == {}  # nothing of a finished call stays behind in the long-lived process
