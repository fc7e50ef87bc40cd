"""The OpenAI Agents SDK's human-in-the-loop scenarios (its `human_in_the_loop*` examples and its
HITL tests: parallel approvals, a call asked again after a rejection, streamed runs, handoffs,
agents used as tools, call ids reused, hosted MCP approvals, "always" decisions, a state written by
an older schema), each run two ways for tests/test_openai_agents_scenarios.py to compare:

- in memory, as the SDK's examples do: `result.to_state()`, `approve` / `reject`, `Runner.run`;
- through `RunStateStore`: save, a person decides in Questlog, load (in a fresh process or in the
  same one) and run, until the run ends.

Every model is a `ScriptedModel` whose answer depends on the conversation only (never on how many
calls this process made), so a fresh process continues where the last one stopped. Every tool
appends a line to a log file: the tool executions, counted across processes. Run as a script, one
round through the store:

    python tests/openai_agents_scenarios.py URL TOKEN SCENARIO LOG MISSION_ID|-

prints one JSON line: {"mission_id": …, "waiting": true} or {"mission_id": …, "final": …}."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Agent, AgentsException, HostedMCPTool, RunConfig, Runner, RunState, function_tool, set_tracing_disabled
from agents.result import RunResultBase
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses.response_output_item import McpApprovalRequest

from questlog_client.openai_agents import RunStateStore
from questlog_client.openai_agents.envelope import arguments_of

set_tracing_disabled(True)

ENOUGH_CALLS = 40  # more model calls than any scenario makes


@dataclass(frozen=True)
class Decision:
    verb: str  # "approve" or "reject"
    note: str = ""
    always: bool = False


APPROVE = Decision("approve")


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[Path], Agent]
    # What the person decides about a call, from what they see: the tool and its arguments.
    decide: Callable[[str, dict[str, Any]], Decision] = lambda tool, arguments: APPROVE
    streamed: bool = False
    run_config: Callable[[], RunConfig] = RunConfig
    # The state is written in this older RunState schema (what an older SDK saved).
    older_schema: str | None = None
    input: str = "Please take care of it."


# --- the model side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]
    call_id: str


@dataclass
class Script:
    """One agent's model: turn k (counted by its own step markers in the conversation) plays
    `turns[k]`, a list of calls; after the last, it answers with the tool outputs it was shown."""

    agent: str
    turns: list[list[Call | McpApprovalRequest]] = field(default_factory=list)
    log: Path | None = None

    def model(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(self.answer)] * ENOUGH_CALLS)

    def answer(self, call: ModelCall) -> list[Any]:
        history = call.input if isinstance(call.input, list) else []
        marker = f"[{self.agent}] step"
        done = sum(1 for item in history if marker in _text_of(item))
        for item in history:
            if _kind(item) == "mcp_approval_response" and self.log is not None and _get(item, "approve") and not self._logged(item):
                # The hosted MCP server (the provider's side) runs the approved call.
                _log(self.log, "hosted:" + str(_get(item, "approval_request_id")), {})
        if done < len(self.turns):
            calls = [function_call(c.tool, c.arguments, call_id=c.call_id) if isinstance(c, Call) else c for c in self.turns[done]]
            return [assistant_message(f"{marker} {done + 1}"), *calls]
        return [assistant_message(f"{self.agent} finished; it was told: {json.dumps(seen_outputs(history))}")]

    def _logged(self, item: Any) -> bool:
        wanted = "hosted:" + str(_get(item, "approval_request_id"))
        return any(entry["tool"] == wanted for entry in executions(self.log))


def seen_outputs(history: list[Any]) -> list[Any]:
    """What the tools answered, as the model reads it: outputs and MCP approval answers."""
    seen: list[Any] = []
    for item in history:
        if _kind(item) == "function_call_output":
            seen.append([_get(item, "call_id"), _get(item, "output")])
        elif _kind(item) == "mcp_approval_response":
            seen.append([_get(item, "approval_request_id"), bool(_get(item, "approve"))])
    return seen


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _kind(item: Any) -> str:
    return str(_get(item, "type") or "")


def _text_of(item: Any) -> str:
    content = _get(item, "content")
    if isinstance(content, str):
        return content
    return " ".join(str(_get(part, "text") or "") for part in content or [])


# --- the tools ------------------------------------------------------------------------------


def _log(log: Path, tool: str, arguments: dict[str, Any]) -> None:
    with log.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


def executions(log: Path | None) -> list[dict[str, Any]]:
    """Every execution logged, in a stable order: the SDK runs approved calls of one turn
    concurrently, so the order they finish in is not part of the behaviour."""
    if log is None or not log.exists():
        return []
    return sorted((json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()), key=json.dumps)


def tool(name: str, log: Path, *, needs_approval: Any = True):
    """A tool that takes a `target`, logs its execution and says what it did."""

    @function_tool(name_override=name, needs_approval=needs_approval)
    def run(target: str) -> str:
        """Act on the target."""
        _log(log, name, {"target": target})
        return f"{name} done for {target}"

    return run


def call(tool_name: str, target: str, call_id: str) -> Call:
    return Call(tool_name, {"target": target}, call_id)


# --- the scenarios --------------------------------------------------------------------------


def single(log: Path, *turns: list[Call], name: str = "Assistant", tools: list[Any] | None = None) -> Agent:
    tools = tools if tools is not None else [tool("send_email", log)]
    return Agent(name=name, model=Script(name, list(turns)).model(), tools=tools)


def _approve(log: Path) -> Agent:
    return single(log, [call("send_email", "team", "call_1")])


def _rejections(log: Path) -> Agent:
    return single(log, [call("send_email", "team", "call_1")])


def _parallel(log: Path) -> Agent:
    return single(
        log,
        [call("send_email", "team", "call_1"), call("book_room", "lodge", "call_2"), call("send_email", "boss", "call_3")],
        tools=[tool("send_email", log), tool("book_room", log)],
    )


def _asked_again(log: Path) -> Agent:
    return single(log, [call("send_email", "everyone", "call_1")], [call("send_email", "team", "call_2")])


def _always(log: Path) -> Agent:
    return single(log, [call("send_email", "team", "call_1")], [call("send_email", "boss", "call_2")], [call("send_email", "venue", "call_3")])


def _call_id_reuse(log: Path) -> Agent:
    return single(log, [call("send_email", "team", "call_1")], [call("send_email", "boss", "call_1")])


def _dynamic_approval(log: Path) -> Agent:
    async def outside_only(_context: Any, params: dict[str, Any], _call_id: str) -> bool:
        return not str(params.get("target", "")).endswith("@example.com")

    return single(
        log,
        [call("send_email", "team@example.com", "call_1"), call("send_email", "press@news.test", "call_2"), call("lookup", "venue", "call_3")],
        tools=[tool("send_email", log, needs_approval=outside_only), tool("lookup", log, needs_approval=False)],
    )


def _handoff(log: Path) -> Agent:
    mailer = single(log, [call("send_email", "team", "call_2")], name="Mailer")
    return Agent(
        name="Triage",
        model=Script("Triage", [[Call("transfer_to_mailer", {}, "call_1")]]).model(),
        handoffs=[mailer],
    )


def _agent_tool(log: Path, *, outer_needs_approval: bool) -> Agent:
    mailer = single(log, [call("send_email", "team", "inner_1")], name="Mailer")
    as_tool = mailer.as_tool(tool_name="mailer", tool_description="Sends the team's emails.", needs_approval=outer_needs_approval)
    return Agent(name="Planner", model=Script("Planner", [[Call("mailer", {"input": "Invite the team"}, "outer_1")]]).model(), tools=[as_tool])


def _hosted_mcp(log: Path) -> Agent:
    request = McpApprovalRequest(id="mcpr_1", arguments='{"repo": "offsite"}', name="create_issue", server_label="github", type="mcp_approval_request")
    hosted = HostedMCPTool(tool_config={"type": "mcp", "server_label": "github", "server_url": "https://mcp.example.test", "require_approval": "always"})
    script = Script("Assistant", [[request]], log=log)
    return Agent(name="Assistant", model=script.model(), tools=[hosted])


def _formatter() -> RunConfig:
    async def say(args: Any) -> str:
        return f"The person declined {args.tool_name}; carry on without it."

    return RunConfig(tool_error_formatter=say)


def _reject(note: str = "", always: bool = False) -> Callable[[str, dict[str, Any]], Decision]:
    return lambda tool, arguments: Decision("reject", note, always)


def _retry_rule(tool_name: str, arguments: dict[str, Any]) -> Decision:
    return Decision("reject", "Not everyone, only the team.") if arguments.get("target") == "everyone" else APPROVE


def _parallel_rule(tool_name: str, arguments: dict[str, Any]) -> Decision:
    return Decision("reject", "I will tell the boss myself.") if arguments.get("target") == "boss" else APPROVE


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("approve", _approve),
        Scenario("reject_without_note", _rejections, _reject()),
        Scenario("reject_with_note", _rejections, _reject("Not before the venue is booked.")),
        Scenario("reject_with_run_formatter", _rejections, _reject(), run_config=_formatter),
        Scenario("several_in_one_turn", _parallel, _parallel_rule),
        Scenario("asked_again_after_rejection", _asked_again, _retry_rule),
        Scenario("streamed", _approve, streamed=True),
        Scenario("streamed_rejection", _asked_again, _retry_rule, streamed=True),
        Scenario("handoff", _handoff),
        Scenario("agent_tool_nested_approval", lambda log: _agent_tool(log, outer_needs_approval=False)),
        Scenario("agent_tool_needs_approval_and_nested", lambda log: _agent_tool(log, outer_needs_approval=True)),
        Scenario("agent_tool_nested_rejection", lambda log: _agent_tool(log, outer_needs_approval=False), _reject("Not now.")),
        Scenario("always_approve", _always, lambda tool, arguments: Decision("approve", always=True)),
        Scenario("always_reject", _always, _reject("Never email from this quest.", always=True)),
        Scenario("call_id_reuse", _call_id_reuse),
        Scenario("dynamic_needs_approval", _dynamic_approval),
        Scenario("hosted_mcp", _hosted_mcp),
        Scenario("older_schema_1_13", _approve, older_schema="1.13"),
    ]
}


# --- running them ---------------------------------------------------------------------------


async def play(scenario: Scenario, agent: Agent, start: str | RunState[Any, Agent[Any]]) -> RunResultBase:
    if not scenario.streamed:
        return await Runner.run(agent, start, run_config=scenario.run_config())
    streaming = Runner.run_streamed(agent, start, run_config=scenario.run_config())
    async for _ in streaming.stream_events():
        pass
    return streaming


def decide_in_memory(scenario: Scenario, state: RunState[Any, Agent[Any]], items: list[Any]) -> int:
    for item in items:
        decision = scenario.decide(item.qualified_name or item.name or "", arguments_of(item))
        if decision.verb == "approve":
            state.approve(item, always_approve=decision.always)
        else:
            state.reject(item, always_reject=decision.always, rejection_message=decision.note or None)
    return len(items)


async def in_memory(scenario: Scenario, log: Path) -> dict[str, Any]:
    """The SDK's own flow: decide on the result's state and run it again, until it ends."""
    agent = scenario.build(log)
    decisions = 0
    try:
        result = await play(scenario, agent, scenario.input)
        while result.interruptions:
            if scenario.older_schema:
                state = await RunState.from_json(agent, as_older_schema(result.to_state().to_json(), scenario.older_schema))
                items = state.get_interruptions()
            else:
                state, items = result.to_state(), result.interruptions
            decisions += decide_in_memory(scenario, state, items)
            result = await play(scenario, agent, state)
    except AgentsException as exc:
        # The SDK refusing a run (a model that reuses a call id) is an outcome to match too.
        return {"error": type(exc).__name__, "executions": executions(log), "decisions": decisions}
    return {"final": result.final_output, "executions": executions(log), "decisions": decisions}


async def store_round(store: RunStateStore, scenario: Scenario, log: Path, mission_id: int | None, agent: Agent | None = None) -> dict[str, Any]:
    """One round through the store: start (no mission yet) or load the person's decisions, run,
    and save again if it pauses (else finish)."""
    agent = agent or scenario.build(log)
    try:
        if mission_id is None:
            result = await play(scenario, agent, scenario.input)
        else:
            result = await play(scenario, agent, await store.load(mission_id, agent))
    except AgentsException as exc:
        return {"mission_id": mission_id, "waiting": False, "error": type(exc).__name__}
    if result.interruptions:
        saved = OlderSdkResult(result, scenario.older_schema) if scenario.older_schema else result
        return {"mission_id": await store.save(saved, mission_id=mission_id, title=scenario.name), "waiting": True}
    await store.finish(mission_id, str(result.final_output))
    return {"mission_id": mission_id, "waiting": False, "final": result.final_output}


class OlderSdkResult:
    """A result as an older SDK would save it: its state written in an older RunState schema."""

    def __init__(self, result: RunResultBase, schema: str) -> None:
        self.result, self.schema = result, schema

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def to_state(self) -> Any:
        state_json = as_older_schema(self.result.to_state().to_json(), self.schema)
        return type("OlderState", (), {"to_json": lambda _self: state_json})()


# What a schema-1.13 RunState holds (the SDK's fixtures of that version have these keys only);
# what later schemas added is left out, as the SDK of that time never wrote it.
SCHEMA_1_13_KEYS = {
    "$schemaVersion",
    "auto_previous_response_id",
    "context",
    "conversation_id",
    "current_agent",
    "current_step",
    "current_turn",
    "current_turn_persisted_item_count",
    "generated_items",
    "generated_prompt_cache_key",
    "input_guardrail_results",
    "last_model_response",
    "last_processed_response",
    "max_turns",
    "model_responses",
    "no_active_agent_run",
    "original_input",
    "output_guardrail_results",
    "previous_response_id",
    "reasoning_item_id_policy",
    "session_items",
    "tool_input_guardrail_results",
    "tool_output_guardrail_results",
    "tool_use_tracker",
    "trace",
}
SCHEMA_1_13_CONTEXT_KEYS = {"approvals", "context", "context_meta", "usage"}


def as_older_schema(state_json: dict[str, Any], schema: str) -> dict[str, Any]:
    if schema != "1.13":
        raise ValueError(f"No shape known for schema {schema}.")
    older = {key: value for key, value in state_json.items() if key in SCHEMA_1_13_KEYS}
    older["context"] = {key: value for key, value in state_json["context"].items() if key in SCHEMA_1_13_CONTEXT_KEYS}
    older["$schemaVersion"] = schema
    return older


if __name__ == "__main__":
    url, token, name, log_path, mission = sys.argv[1:6]

    async def main() -> dict[str, Any]:
        async with RunStateStore(url, token, takeover_timeout=30, heartbeat_interval=0.5) as store:
            return await store_round(store, SCENARIOS[name], Path(log_path), None if mission == "-" else int(mission))

    print(json.dumps(asyncio.run(main())), flush=True)
