"""What a saved OpenAI Agents run looks like in Questlog, and whether this process can restore it.

The checkpoint's agent state holds one key, `openai_agents`, with the RunState as `to_json()`
wrote it and what is needed to judge it before restoring: its `$schemaVersion`, the SDK version
that wrote it, the agents it names, and the paused tool calls (the approvals' `agent_ref`s)."""

from __future__ import annotations

import json
from typing import Any, cast

import agents
from agents import Agent, ToolApprovalItem
from agents.result import RunResult, RunResultStreaming
from agents.run_state import CURRENT_SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS

from questlog_client import errors

# What Runner.run and Runner.run_streamed answer: both carry the paused calls and give their RunState.
AnyRunResult = RunResult | RunResultStreaming
STATE_KEY = "openai_agents"
ACTION_LIMIT = 500  # the API's limit on an approval's `action`


def reachable_agents(agent: Agent[Any]) -> list[Agent[Any]]:
    """`agent` and every agent it reaches, directly or not: those it hands off to and those it
    runs as a tool (`Agent.as_tool`), whose paused calls a RunState carries as nested runs."""
    found: dict[int, Agent[Any]] = {}
    stack: list[Agent[Any]] = [agent]
    while stack:
        current = stack.pop()
        if id(current) in found:
            continue
        found[id(current)] = current
        stack.extend(handoff for handoff in current.handoffs if isinstance(handoff, Agent))
        stack.extend(tool_agent for tool in current.tools if isinstance(tool_agent := agent_of_tool(tool), Agent))
    return list(found.values())


def agent_of_tool(tool: Any) -> Agent[Any] | None:
    """The agent an agent-tool runs (the SDK marks what `Agent.as_tool` makes), else None."""
    return getattr(tool, "_agent_instance", None) if getattr(tool, "_is_agent_tool", False) else None


def agent_names(agent: Agent[Any]) -> list[str]:
    """The names of the agents a restored RunState may name (`reachable_agents`). A `Handoff`
    object only names its target, so its name counts but its own handoffs cannot be followed."""
    names: set[str] = set()
    for current in reachable_agents(agent):
        names.add(current.name)
        names.update(handoff.agent_name for handoff in current.handoffs if not isinstance(handoff, Agent))
    return sorted(names)


def arguments_of(item: ToolApprovalItem) -> dict[str, Any]:
    """The call's arguments as an object, which is what an approval's payload must be. Arguments
    that are not a JSON object (a shell command, broken JSON) are kept whole under `arguments`."""
    raw = item.arguments
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def words_by_call(result: AnyRunResult) -> dict[str, str]:
    """What the assistant said in the model response that made each tool call: the person deciding
    reads why the agent wants to act in its own words."""
    words: dict[str, str] = {}
    for response in result.raw_responses:
        texts: list[str] = []
        call_ids: list[str] = []
        # Read by their `type` tags, as the Responses API defines them, not by class.
        for item in cast(list[Any], response.output):
            kind = getattr(item, "type", None)
            if kind == "message":
                texts.extend(part.text for part in item.content if getattr(part, "type", None) == "output_text" and part.text.strip())
            elif getattr(item, "call_id", None):
                call_ids.append(item.call_id)
        for call_id in call_ids:
            if texts:
                words[call_id] = "\n".join(texts).strip()
    return words


def approval_items(result: AnyRunResult) -> list[dict[str, Any]]:
    """One approval request per paused tool call: action = the tool's name, payload = its parsed
    arguments, reason = the agent's words (or a plain default), agent_ref = the call id."""
    words = words_by_call(result)
    items = []
    for item in result.interruptions:
        call_id = item.call_id
        if not call_id:
            raise ValueError(f"The paused call to {item.name!r} has no call id: Questlog cannot tell its decision apart.")
        tool = item.qualified_name or item.name or "a tool"
        default = f"The agent {item.agent.name!r} wants to call {tool}, which needs a person's approval before it runs."
        items.append(
            {
                "action": tool[:ACTION_LIMIT],
                "payload": arguments_of(item),
                "reason": words.get(call_id) or default,
                "agent_ref": call_id,
            }
        )
    return items


def envelope(result: AnyRunResult, state_json: dict[str, Any]) -> dict[str, Any]:
    calls = [{"call_id": item.call_id, "tool": item.name, "agent": item.agent.name, "arguments": arguments_of(item)} for item in result.interruptions]
    return {
        "schema_version": state_json.get("$schemaVersion"),
        "sdk_version": agents.__version__,
        "agents": agent_names(result.last_agent),
        "current_agent": (state_json.get("current_agent") or {}).get("name"),
        "calls": calls,
        "run_state": state_json,
    }


def check_restorable(mission_id: int, saved: dict[str, Any] | None, agent: Agent[Any]) -> dict[str, Any]:
    """Refuse, naming both sides, a state this process cannot restore: a schema this SDK does not
    read, or agents the given agent graph does not have. Restarting from scratch instead would
    silently redo what the run had done, so this is an error, never a fallback. Answers `saved`."""
    available = {"sdk_version": agents.__version__, "schema_version": CURRENT_SCHEMA_VERSION, "agents": agent_names(agent)}
    if not isinstance(saved, dict) or not isinstance(saved.get("run_state"), dict):
        raise errors.RunStateMismatch(
            f"Mission {mission_id} holds no OpenAI Agents run state (its head checkpoint has no {STATE_KEY!r} key): "
            "save a result with RunStateStore.save first.",
            saved={},
            available=available,
        )
    summary = {key: saved.get(key) for key in ("sdk_version", "schema_version", "agents", "current_agent")}
    schema = saved.get("schema_version")
    needed = sorted({saved.get("current_agent"), *(call.get("agent") for call in saved.get("calls", []))} - {None})
    missing = [name for name in needed if name not in available["agents"]]
    problems = []
    if schema not in SUPPORTED_SCHEMA_VERSIONS:
        problems.append(
            f"its RunState schema {schema!r} is not one this SDK reads (it writes {CURRENT_SCHEMA_VERSION} "
            f"and reads {', '.join(sorted(SUPPORTED_SCHEMA_VERSIONS, key=_version_key))})"
        )
    if missing:
        problems.append(f"it names agents {missing} that the agent given ({agent.name!r}) does not reach, which has {available['agents']}")
    if problems:
        raise errors.RunStateMismatch(
            f"Mission {mission_id} was saved by openai-agents {saved.get('sdk_version')} with RunState schema {schema!r} "
            f"and agents {saved.get('agents')}; this process runs openai-agents {agents.__version__} with agents "
            f"{available['agents']}: " + "; ".join(problems) + ". Load it with the agents and SDK that can restore it.",
            saved=summary,
            available=available,
        )
    return saved


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
