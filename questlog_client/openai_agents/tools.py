"""Approved tool calls run through the operation ledger, keyed by their call id, so a call runs
once however many times its RunState is loaded and run again (a crash after the tool ran, a
retried resume script): the second time, the ledger answers the stored output and the tool is
not called.

`guard_tools` wraps, in place and once, the `on_invoke_tool` of every function tool that needs
approval in an agent graph. The wrapper looks the call id up in `APPROVED`, which `load` fills:
a call found there goes through the ledger of the run `load` started, with the arguments the
person approved (their edit, if they edited); any other call (approved by the application
itself, without Questlog) runs as the SDK would run it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool

from questlog_client import models
from questlog_client.openai_agents.envelope import agent_of_tool, reachable_agents
from questlog_client.runs import Run

LEDGER_KIND = "openai_agents.tool"

# Answers what an unconfirmed earlier attempt returned (the tool's output), or None when it
# certainly did not happen (then it runs).
Reconcile = Callable[[models.Operation], Any]
Invoke = Callable[[Any, str], Awaitable[Any]]


@dataclass
class ApprovedCall:
    """A call a person approved, as `load` prepared it for the run it started."""

    run: Run
    call_id: str
    tool: str
    # The person's arguments when they edited the call; None runs it as the model asked.
    edited: dict[str, Any] | None = None
    reconcile: Reconcile | None = None

    # Set when the model used this call id before in the mission (models may reuse ids): this
    # call is another one than the earlier, and its ledger key says which approval it answers.
    occurrence: int | None = None

    @property
    def key(self) -> str:
        base = f"openai-agents:{self.call_id}"
        return base if self.occurrence is None else f"{base}#{self.occurrence}"


# Process-wide by call id: the wrapped tool belongs to the agent object, which any number of
# loads may share; the newest load of a call wins. An entry lives from `load` to its call's end:
# a later call that reuses the id (or the same call in a later round) must not find it.
APPROVED: dict[str, ApprovedCall] = {}


class LedgerInvoke:
    """The wrapped `on_invoke_tool`: see the module's docstring."""

    def __init__(self, tool_name: str, invoke: Invoke) -> None:
        self.tool_name = tool_name
        self.invoke = invoke

    async def __call__(self, context: Any, arguments_json: str) -> Any:
        approved = APPROVED.get(getattr(context, "tool_call_id", None) or "")
        if approved is None:
            return await self.invoke(context, arguments_json)
        loop = asyncio.get_running_loop()
        arguments = arguments_json if approved.edited is None else json.dumps(approved.edited)

        def effect(op: models.Operation) -> models.Outcome:
            # The client's safe path is synchronous and runs in a worker thread; the tool itself
            # runs on the event loop, which is free while that thread waits.
            async def invoked() -> Any:  # run_coroutine_threadsafe takes a coroutine, `invoke` answers an awaitable
                return await self.invoke(context, arguments)

            output = asyncio.run_coroutine_threadsafe(invoked(), loop).result()
            return models.Outcome(approved.call_id, "returned", {"output": _storable(output)})

        call = approved.run.operation(
            approved.key,
            kind=LEDGER_KIND,
            target=self.tool_name,
            request={"arguments": _parsed(arguments)},
            reconcile=_reconcile_hook(approved),
        )
        try:
            receipt = await asyncio.to_thread(call, effect)
        finally:
            if APPROVED.get(approved.call_id) is approved:
                del APPROVED[approved.call_id]
        return (receipt.receipt or {}).get("output")


def guard_tools(agent: Agent[Any]) -> None:
    """Wrap the approval-needing function tools of `agent` and of every agent it reaches (by
    handoff or as a tool). An agent-tool itself is not wrapped: it is no side effect but a nested
    run, which may pause and be resumed (the SDK calls it again), so it has no one output to keep;
    the side effects are its agent's own tools, which are wrapped."""
    for current in reachable_agents(agent):
        for tool in current.tools:
            if (
                isinstance(tool, FunctionTool)
                and tool.needs_approval is not False
                and agent_of_tool(tool) is None
                and not isinstance(tool.on_invoke_tool, LedgerInvoke)
            ):
                tool.on_invoke_tool = LedgerInvoke(tool.name, tool.on_invoke_tool)


def runs_through_ledger(agent: Agent[Any], tool_name: str) -> bool:
    """Whether `agent`'s tool `tool_name` is one `guard_tools` wrapped: only such a call may be
    registered in APPROVED, whose entry the wrapper removes when the call ends."""
    return any(isinstance(tool, FunctionTool) and tool.name == tool_name and isinstance(tool.on_invoke_tool, LedgerInvoke) for tool in agent.tools)


def _reconcile_hook(approved: ApprovedCall) -> Callable[[models.Operation], models.Outcome | None] | None:
    if approved.reconcile is None:
        return None  # the client then refuses to repeat an unconfirmed attempt (ReconcileNeeded)
    reconcile = approved.reconcile

    def hook(op: models.Operation) -> models.Outcome | None:
        output = reconcile(op)
        return None if output is None else models.Outcome(approved.call_id, "reconciled", {"output": _storable(output)})

    return hook


def _parsed(arguments_json: str) -> Any:
    """The arguments as the ledger's request keeps them: the same on every load of the call, so
    planning it again matches the first plan."""
    try:
        return json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        return arguments_json


def _storable(output: Any) -> Any:
    """The output as the ledger can keep it (JSON), so a replay hands the model the same thing."""
    try:
        json.dumps(output)
        return output
    except (TypeError, ValueError):
        return str(output)
