"""The agent tests/test_openai_agents.py drives, importable by the tests and runnable as the fresh
process that resumes a saved run:

    python tests/openai_agents_agent.py URL TOKEN MISSION_ID OUTBOX [crash|finish]

Its one tool, `send_email`, needs approval and appends a line to OUTBOX (the fake side-effect
target, counted across processes). ScriptedModel plays the model. The script prints one JSON line:
the final output and the tool output the model was shown. With `crash` the model, called after the
tool ran, prints TOOL-RAN and hangs, for the test to kill the process there."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from questlog_client.openai_agents import RunStateStore

set_tracing_disabled(True)

AGENT_NAME = "Inviter"
ASKING = "I will email the team about the offsite on May 14."
INVITE = {"to": "team@example.com", "subject": "Offsite"}
FINAL = "Invitation sent."


def build_agent(model: ScriptedModel, outbox: Path, name: str = AGENT_NAME) -> Agent:
    @function_tool(needs_approval=True)
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        with outbox.open("a", encoding="utf-8") as file:
            file.write(json.dumps({"to": to, "subject": subject}) + "\n")
        return f"sent to {to}: {subject}"

    return Agent(name=name, model=model, tools=[send_email])


def asking_model(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    """One turn: the assistant's words and a send_email call per (call id, arguments)."""
    calls = calls or (("call_invite", INVITE),)
    return ScriptedModel([[assistant_message(ASKING), *(function_call("send_email", args, call_id=cid) for cid, args in calls)]])


def answering_model(*, crash: bool = False) -> ScriptedModel:
    def answer(call: Any) -> list[Any]:
        if crash:
            print("TOOL-RAN", flush=True)
            time.sleep(120)
        return [assistant_message(FINAL)]

    return ScriptedModel([ModelStep.respond(answer)])


def tool_outputs(model: ScriptedModel) -> list[str]:
    """The function call outputs the model was shown on its last call."""
    return [item["output"] for item in model.last_call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]


def sent(outbox: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in outbox.read_text(encoding="utf-8").splitlines()] if outbox.exists() else []


async def resume(url: str, token: str, mission_id: int, outbox: Path, mode: str = "") -> dict[str, Any]:
    model = answering_model(crash=mode == "crash")
    agent = build_agent(model, outbox)
    async with RunStateStore(url, token, takeover_timeout=30, heartbeat_interval=0.5) as store:
        state = await store.load(mission_id, agent)
        result = await Runner.run(agent, state)
        if mode == "finish":
            await store.finish(mission_id, str(result.final_output))
    return {"final": result.final_output, "tool_outputs": tool_outputs(model)}


if __name__ == "__main__":
    url, token, mission, outbox = sys.argv[1:5]
    print(json.dumps(asyncio.run(resume(url, token, int(mission), Path(outbox), *sys.argv[5:6]))), flush=True)
