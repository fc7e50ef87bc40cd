"""questlog_client.openai_agents.RunStateStore against a live server and real PostgreSQL: a paused
OpenAI Agents run becomes approvals a person decides in the inbox, and the saved RunState comes
back in a fresh process with those decisions applied; an approved tool runs exactly once across
loads and a crash; rejections, edits, pending decisions, a person's pause or cancel and states this
process cannot restore each have their answer. ScriptedModel plays the model (no API key)."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from agents import Agent, Runner, UserError
from django.db import connection
from django.test import Client
from django.utils import timezone

from checkpoints.models import Operation
from questlog_client import MissionNotStartable, Questlog, RunEnded, RunStateMismatch, StillWaiting
from questlog_client.openai_agents import RunStateStore
from questlog_client.testing import PersonSession
from quests.models import Approval, Run
from quests.selectors.people import inbox_approvals
from quests.services.approvals import approvals_expire_due
from quests.services.tokens import token_create
from tests.openai_agents_agent import ASKING, FINAL, INVITE, answering_model, asking_model, build_agent, resume, sent, tool_outputs

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
AGENT_SCRIPT = ROOT / "tests" / "openai_agents_agent.py"
EXAMPLE = ROOT / "examples" / "openai_agents_approval.py"


@pytest.fixture
def token(alice) -> str:
    return token_create(user=alice, name="openai-agents-test")[1]


@pytest.fixture
def alice_in_browser(live_server, alice):
    session = PersonSession(live_server.url, "alice", "alice-password")
    yield session
    session.close()


@pytest.fixture
def outbox(tmp_path) -> Path:
    return tmp_path / "outbox.jsonl"


def ask(url: str, token: str, outbox: Path, *calls) -> int:
    """Run the agent until it pauses on its tool call(s), and save it as a new mission."""

    async def go() -> int:
        agent = build_agent(asking_model(*calls), outbox)
        result = await Runner.run(agent, "Email the team about the offsite")
        assert result.interruptions
        async with RunStateStore(url, token) as store:
            return await store.save(result, title="Invite the team")

    return asyncio.run(go())


def load(url: str, token: str, mission_id: int, agent: Agent):
    async def go():
        async with RunStateStore(url, token) as store:
            return await store.load(mission_id, agent)

    return asyncio.run(go())


def approvals_of(person: PersonSession, mission_id: int):
    return person.resume(mission_id).approvals


def fresh_process(url: str, token: str, mission_id: int, outbox: Path, *mode: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(AGENT_SCRIPT), url, token, str(mission_id), str(outbox), *mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def crash_after_the_tool(url: str, token: str, mission_id: int, outbox: Path) -> None:
    """A fresh process that is killed (SIGKILL) right after the tool ran, before the run ends."""
    process = subprocess.Popen(
        [sys.executable, str(AGENT_SCRIPT), url, token, str(mission_id), str(outbox), "crash"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.strip() == "TOOL-RAN", line + process.stderr.read()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


def age_the_active_run(make_stale, mission_id: int) -> None:
    """The process that held the mission's run is gone: let its heartbeat lapse."""
    for run in Run.objects.filter(mission_id=mission_id, ended_at__isnull=True):
        make_stale(run.pk)


@pytest.mark.long
def test_an_approved_tool_runs_once_in_a_fresh_process_across_loads_and_a_crash(live_server, alice, token, alice_in_browser, outbox, tmp_path, make_stale):
    mission_id = ask(live_server.url, token, outbox)

    [approval] = inbox_approvals(alice)
    assert (approval.mission_id, approval.action, approval.payload, approval.reason, approval.agent_ref) == (
        mission_id,
        "send_email",
        INVITE,
        ASKING,
        "call_invite",
    )
    browser = Client()
    browser.force_login(alice)
    inbox = browser.get("/approvals/").content.decode()
    assert "send_email" in inbox and ASKING in inbox
    state = alice_in_browser.resume(mission_id).checkpoint.agent_state["openai_agents"]
    assert state["schema_version"] == state["run_state"]["$schemaVersion"] and state["agents"] == ["Inviter"]
    assert state["sdk_version"] and [call["call_id"] for call in state["calls"]] == ["call_invite"]

    alice_in_browser.decide_approval(approval.id, "approve")
    first = fresh_process(live_server.url, token, mission_id, outbox)
    assert first == {"final": FINAL, "tool_outputs": ["sent to team@example.com: Offsite"]}
    assert sent(outbox) == [INVITE]

    # The same state loaded and run again (say the resume script is retried): the ledger answers.
    age_the_active_run(make_stale, mission_id)
    again = fresh_process(live_server.url, token, mission_id, outbox, "finish")
    assert again == first
    assert sent(outbox) == [INVITE]
    assert alice_in_browser.mission(mission_id)["status"] == "completed"

    # A crash right after the tool ran, then another load: still once.
    crashed_outbox = tmp_path / "crashed.jsonl"
    crashed = ask(live_server.url, token, crashed_outbox)
    [approval] = approvals_of(alice_in_browser, crashed)
    alice_in_browser.decide_approval(approval.id, "approve")
    crash_after_the_tool(live_server.url, token, crashed, crashed_outbox)
    assert sent(crashed_outbox) == [INVITE]
    age_the_active_run(make_stale, crashed)
    after = fresh_process(live_server.url, token, crashed, crashed_outbox, "finish")
    assert after == {"final": FINAL, "tool_outputs": ["sent to team@example.com: Offsite"]}
    assert sent(crashed_outbox) == [INVITE]
    ledger = Operation.objects.get(mission_id=crashed)
    assert (ledger.key, ledger.status, ledger.attempts, ledger.receipt) == (
        "openai-agents:call_invite",
        "completed",
        1,
        {"output": "sent to team@example.com: Offsite"},
    )


def test_a_rejected_call_never_runs_and_the_model_reads_the_persons_note(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    alice_in_browser.decide_approval(approval.id, "reject", note="Not before the venue is booked.")

    async def go():
        model = answering_model()
        agent = build_agent(model, outbox)
        async with RunStateStore(live_server.url, token) as store:
            state = await store.load(mission_id, agent)
            result = await Runner.run(agent, state)
            await store.finish(mission_id, str(result.final_output))
        return model

    model = asyncio.run(go())
    assert sent(outbox) == []
    assert tool_outputs(model) == ["Not before the venue is booked."]
    assert Operation.objects.filter(mission_id=mission_id).count() == 0
    assert alice_in_browser.mission(mission_id)["status"] == "completed"


def test_an_edited_call_runs_with_the_persons_arguments(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    edited = {"to": "team@example.com", "subject": "Offsite, May 14-16"}
    alice_in_browser.decide_approval(approval.id, "edit", payload=edited, note="add the dates")
    assert asyncio.run(resume(live_server.url, token, mission_id, outbox, "finish")) == {
        "final": FINAL,
        "tool_outputs": ["sent to team@example.com: Offsite, May 14-16"],
    }
    assert sent(outbox) == [edited]
    assert Operation.objects.get(mission_id=mission_id).request == {"arguments": edited}


def test_calls_paused_together_are_decided_one_by_one(live_server, token, alice_in_browser, outbox):
    lead = {"to": "lead@example.com", "subject": "Offsite budget"}
    mission_id = ask(live_server.url, token, outbox, ("call_team", INVITE), ("call_lead", lead))
    team, boss = approvals_of(alice_in_browser, mission_id)
    assert [(a.agent_ref, a.payload, a.status) for a in (team, boss)] == [("call_team", INVITE, "pending"), ("call_lead", lead, "pending")]
    assert team.raw["reason"] == boss.raw["reason"] == ASKING
    alice_in_browser.decide_approval(team.id, "approve")
    with pytest.raises(StillWaiting) as waiting:
        asyncio.run(resume(live_server.url, token, mission_id, outbox))
    assert [a.id for a in waiting.value.approvals] == [boss.id]
    alice_in_browser.decide_approval(boss.id, "reject", note="I will tell the lead myself.")
    outcome = asyncio.run(resume(live_server.url, token, mission_id, outbox, "finish"))
    assert sorted(outcome["tool_outputs"]) == sorted(["sent to team@example.com: Offsite", "I will tell the lead myself."])
    assert sent(outbox) == [INVITE]


def test_loading_while_a_decision_is_pending_raises_still_waiting_and_starts_nothing(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    with pytest.raises(StillWaiting) as waiting:
        asyncio.run(resume(live_server.url, token, mission_id, outbox))
    assert "send_email" in str(waiting.value) and waiting.value.mission_id == mission_id
    assert alice_in_browser.mission(mission_id)["status"] == "waiting_for_approval"
    assert not Run.objects.filter(mission_id=mission_id, ended_at__isnull=True).exists()
    assert sent(outbox) == []


@pytest.mark.parametrize(("act", "stop_reason"), [("pause", "paused_by_user"), ("cancel", "cancelled_by_user")])
def test_a_paused_or_cancelled_mission_is_not_loaded(live_server, token, alice_in_browser, outbox, act, stop_reason):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    if act == "pause":
        alice_in_browser.decide_approval(approval.id, "approve")
    getattr(alice_in_browser, act)(mission_id)
    with pytest.raises(MissionNotStartable) as refused:
        asyncio.run(resume(live_server.url, token, mission_id, outbox))
    assert refused.value.stop_reason == stop_reason and stop_reason in str(refused.value)
    assert sent(outbox) == []


def test_a_state_this_process_cannot_restore_is_refused_naming_both_sides(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    alice_in_browser.decide_approval(approval.id, "approve")

    other = build_agent(answering_model(), outbox, name="Someone else")
    with pytest.raises(RunStateMismatch) as mismatch:
        load(live_server.url, token, mission_id, other)
    message = str(mismatch.value)
    assert "'Inviter'" in message and "'Someone else'" in message
    assert mismatch.value.saved["agents"] == ["Inviter"] and mismatch.value.available["agents"] == ["Someone else"]

    # A state written in a RunState schema this SDK does not read (as a future SDK might write it).
    saved = alice_in_browser.resume(mission_id).checkpoint.agent_state["openai_agents"]
    future = {**saved, "schema_version": "9.0", "sdk_version": "9.9.9", "run_state": {**saved["run_state"], "$schemaVersion": "9.0"}}
    with Questlog(live_server.url, token) as ql:
        newer = ql.missions.create("Invite the team", "Email the team about the offsite")
        with newer.start_run(agent="future sdk", heartbeat_interval=0) as run:
            run.request_approvals(
                [{"action": "send_email", "payload": INVITE, "reason": ASKING, "agent_ref": "call_invite"}], agent_state={"openai_agents": future}
            )
    [approval] = approvals_of(alice_in_browser, newer.id)
    alice_in_browser.decide_approval(approval.id, "approve")
    with pytest.raises(RunStateMismatch) as mismatch:
        asyncio.run(resume(live_server.url, token, newer.id, outbox))
    message = str(mismatch.value)
    assert "'9.0'" in message and "9.9.9" in message and "1.21" in message
    assert sent(outbox) == [] and not Run.objects.filter(mission_id=newer.id, ended_at__isnull=True).exists()


def test_a_mission_without_a_saved_run_state_is_refused(live_server, token, outbox):
    with Questlog(live_server.url, token) as ql:
        mission = ql.missions.create("Plain mission", "Nothing saved by the adapter")
    with pytest.raises(RunStateMismatch, match="holds no OpenAI Agents run state"):
        load(live_server.url, token, mission.id, Agent(name="Inviter"))


def test_a_run_that_pauses_again_is_saved_to_the_same_mission_on_the_run_load_started(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    [first] = approvals_of(alice_in_browser, mission_id)
    alice_in_browser.decide_approval(first.id, "approve")
    follow_up = {"to": "venue@example.com", "subject": "Headcount"}

    async def second_pause() -> int:
        model = asking_model(("call_venue", follow_up))
        agent = build_agent(model, outbox)
        async with RunStateStore(live_server.url, token) as store:
            state = await store.load(mission_id, agent)
            result = await Runner.run(agent, state)
            assert [item.call_id for item in result.interruptions] == ["call_venue"]
            return await store.save(result, mission_id=mission_id)

    assert asyncio.run(second_pause()) == mission_id
    assert sent(outbox) == [INVITE]
    runs = Run.objects.filter(mission_id=mission_id).order_by("number")
    assert [(run.number, run.stop_reason) for run in runs] == [(1, "waiting_for_approval"), (2, "waiting_for_approval")]
    second = approvals_of(alice_in_browser, mission_id)[-1]
    assert (second.agent_ref, second.payload, second.status) == ("call_venue", follow_up, "pending")
    alice_in_browser.decide_approval(second.id, "approve")
    assert asyncio.run(resume(live_server.url, token, mission_id, outbox, "finish"))["final"] == FINAL
    assert sent(outbox) == [INVITE, follow_up]


@pytest.mark.long
def test_the_example_runs_against_a_live_server(live_server, token):
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--user", "alice", "--password", "alice-password", "--poll", "0.2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "QUESTLOG_URL": live_server.url, "QUESTLOG_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[mail] sent to team@example.com: Offsite, May 14-16" in result.stdout
    assert result.stdout.rstrip().endswith("completed; invitations sent: 1")


@pytest.mark.long
def test_the_example_waits_for_a_decision_made_in_the_browser(live_server, token, alice_in_browser):
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--poll", "0.2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "QUESTLOG_URL": live_server.url, "QUESTLOG_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        waiting = process.stdout.readline()
        assert f"waits for your approval: {live_server.url}/approvals/" in waiting, waiting + process.stderr.read()
        mission_id = int(waiting.split()[1])
        assert "still waits for a person to decide" in process.stdout.readline()
        [approval] = approvals_of(alice_in_browser, mission_id)
        alice_in_browser.decide_approval(approval.id, "approve")
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, out + err
    assert out.rstrip().endswith(f"Mission {mission_id} completed; invitations sent: 1")


def test_a_pause_after_load_fences_the_tool_off(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    alice_in_browser.decide_approval(approval.id, "approve")

    async def go():
        agent = build_agent(answering_model(), outbox)
        async with RunStateStore(live_server.url, token) as store:
            state = await store.load(mission_id, agent)
            await asyncio.to_thread(alice_in_browser.pause, mission_id)
            await Runner.run(agent, state)

    # The SDK fails the run with its own UserError, caused by the client's RunEnded.
    with pytest.raises(UserError) as failed:
        asyncio.run(go())
    assert isinstance(failed.value.__cause__, RunEnded) and failed.value.__cause__.stop_reason == "paused_by_user"
    assert sent(outbox) == []
    assert not Operation.objects.filter(mission_id=mission_id).exists()


def test_an_attempt_never_confirmed_is_reconciled_never_repeated(live_server, token, alice_in_browser, outbox, make_stale):
    mission_id = ask(live_server.url, token, outbox)
    [approval] = approvals_of(alice_in_browser, mission_id)
    alice_in_browser.decide_approval(approval.id, "approve")

    def crashed_attempt() -> None:
        """What a process that crashed after attempting the call, before its receipt, left."""
        try:
            run_id = Run.objects.get(mission_id=mission_id, ended_at__isnull=True).pk
        finally:
            connection.close()  # this worker thread's own connection would outlive the test database
        with Questlog(live_server.url, token) as ql:
            _, op = ql.request(
                "POST",
                f"runs/{run_id}/operations",
                {
                    "key": "openai-agents:call_invite",
                    "kind": "openai_agents.tool",
                    "target": "send_email",
                    "request": {"arguments": INVITE},
                    "max_attempts": 3,
                },
            )
            ql.request("POST", f"operations/{op['id']}/attempt", None, idempotent=False)

    async def run_with(reconcile, *, crash_first: bool = False):
        model = answering_model()
        agent = build_agent(model, outbox)
        async with RunStateStore(live_server.url, token, reconcile=reconcile) as store:
            state = await store.load(mission_id, agent)
            if crash_first:
                await asyncio.to_thread(crashed_attempt)
            await Runner.run(agent, state)
            await store.finish(mission_id)
        return model

    with pytest.raises(UserError) as failed:
        asyncio.run(run_with(None, crash_first=True))
    assert type(failed.value.__cause__).__name__ == "ReconcileNeeded"
    assert sent(outbox) == []

    age_the_active_run(make_stale, mission_id)
    looked_up = []
    model = asyncio.run(run_with({"send_email": lambda op: looked_up.append(op.key) or "sent to team@example.com (found in the mail log)"}))
    assert looked_up == ["openai-agents:call_invite"] and sent(outbox) == []
    assert tool_outputs(model) == ["sent to team@example.com (found in the mail log)"]
    ledger = Operation.objects.get(mission_id=mission_id)
    assert (ledger.status, ledger.external_status, ledger.attempts) == ("completed", "reconciled", 1)


def test_an_expired_approval_is_a_rejection_the_model_is_told_about(live_server, token, alice_in_browser, outbox):
    mission_id = ask(live_server.url, token, outbox)
    Approval.objects.filter(mission_id=mission_id).update(respond_by=timezone.now() - timedelta(minutes=1))
    assert approvals_expire_due() == 1

    async def go():
        model = answering_model()
        agent = build_agent(model, outbox)
        async with RunStateStore(live_server.url, token) as store:
            state = await store.load(mission_id, agent)
            await Runner.run(agent, state)
            await store.finish(mission_id)
        return model

    model = asyncio.run(go())
    assert tool_outputs(model) == ["Nobody decided in time: the approval expired, so this tool call was not made."]
    assert sent(outbox) == []
