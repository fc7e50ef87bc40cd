"""The MCP server an agent host adds: Questlog's tools, the `resume_mission` prompt and the resume
resource, each a thin adapter over one `Backend` call (the API's own rules decide everything).

Each tool answers structured content (ids as integers) and a short sentence for the model. An API
error becomes a tool error (`isError`) carrying the API's error object: its `code`, its sentence
and its fields (`run_ended` with `stop_reason`, say), so the model reads what an agent on the HTTP
API would read."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, TextContent

from questlog_client import errors
from questlog_client.mcp.backend import Backend, Json
from questlog_client.mcp.briefing import briefing

RecordKind = Literal["decision", "open_question", "blocker", "dependency", "evidence", "note", "tool_output"]
StopReason = Literal["completed", "blocked_external", "failed_retry_budget"]

INSTRUCTIONS = """Questlog keeps this agent's save state across sessions.
At the start of a session, call resume_mission (or list_missions, then resume_mission) and follow
its next_action; start_run before working. Save a checkpoint after each step. Before any side
effect, call begin_operation with a stable key: act only when its status is `go`, then
complete_operation (or fail_operation). `completed` means it is already done: use the receipt,
never repeat it. `reconcile` means an earlier attempt's outcome is unknown: check the target
first. Ask a person with request_approval; the run then ends until they decide."""

BackendFor = Callable[[], Backend]


def reply(text: str, data: Json) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def refusal(exc: errors.QuestlogError) -> CallToolResult:
    if isinstance(exc, errors.ApiError):
        error = {**exc.error, "code": exc.code, "message": exc.message}
        data = {"error": error, "status": exc.status}
        text = f"{exc.code}: {exc.message}"
    else:  # the server could not be reached (the stdio command's HTTP calls)
        data = {"error": {"code": "unreachable", "message": str(exc)}}
        text = f"unreachable: {exc}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data, is_error=True)


async def answered(call: Awaitable[CallToolResult]) -> CallToolResult:
    try:
        return await call
    except errors.QuestlogError as exc:
        return refusal(exc)


def receipt_of(op: Json) -> Json:
    return {"external_id": op.get("external_id"), "external_status": op.get("external_status"), "receipt": op.get("receipt")}


def mission_line(mission: Json) -> Json:
    return {"mission_id": mission["id"], "title": mission["title"], "status": mission["status"], "stop_reason": mission.get("stop_reason")}


def bundle_result(bundle: Json) -> Json:
    """The resume bundle with the mission's id and the head checkpoint's agent state on top."""
    checkpoint = bundle.get("checkpoint") or {}
    return {"mission_id": bundle["mission"]["id"], **bundle, "agent_state": checkpoint.get("agent_state")}


def build_server(backend_for: BackendFor, *, name: str = "questlog") -> MCPServer:
    """The server with every tool, the prompt and the resource; `backend_for()` gives the backend
    of the call being served (on the Questlog server, the one acting for the request's token)."""
    server = MCPServer(name, title="Questlog", instructions=INSTRUCTIONS)
    add_mission_tools(server, backend_for)
    add_run_tools(server, backend_for)
    add_operation_tools(server, backend_for)
    add_briefing(server, backend_for)
    return server


def add_mission_tools(server: MCPServer, backend_for: BackendFor) -> None:
    @server.tool(description="Create a mission: what to achieve, and the rules the work must keep to.")
    async def create_mission(title: str, objective: str, constraints: list[str] | None = None) -> CallToolResult:
        async def call() -> CallToolResult:
            mission = await backend_for().create_mission({"title": title, "objective": objective, "constraints": constraints or []})
            return reply(f"Mission {mission['id']} created ({mission['status']}).", {**mission_line(mission), "mission": mission})

        return await answered(call())

    @server.tool(description="The missions this token can see, newest first; `status` keeps only those in it.")
    async def list_missions(status: str | None = None) -> CallToolResult:
        async def call() -> CallToolResult:
            missions = [mission_line(m) for m in await backend_for().list_missions() if status in (None, m["status"])]
            return reply(f"{len(missions)} mission(s).", {"missions": missions})

        return await answered(call())

    @server.tool(
        description=(
            "The mission's resume bundle: next_action and message, constraints, decisions, open questions, "
            "blockers, approvals with their decisions, the ledger with receipts, and the head's agent_state."
        )
    )
    async def resume_mission(mission_id: int) -> CallToolResult:
        async def call() -> CallToolResult:
            bundle = await backend_for().resume(mission_id)
            return reply(f"{bundle['next_action']}: {bundle['message']}", bundle_result(bundle))

        return await answered(call())


def add_run_tools(server: MCPServer, backend_for: BackendFor) -> None:
    @server.tool(description="Start a run of the mission (one at a time); answers the run's id and the resume bundle.")
    async def start_run(mission_id: int, agent: str = "") -> CallToolResult:
        async def call() -> CallToolResult:
            started = await backend_for().start_run(mission_id, {"agent": agent})
            run, resume = started["run"], started["resume"]
            data = {"run_id": run["id"], "run": run, "resume": bundle_result(resume)}
            return reply(f"Run {run['id']} started. {resume['message']}", data)

        return await answered(call())

    @server.tool(description="Save the agent's state (any JSON object) as a checkpoint of the run.")
    async def save_checkpoint(run_id: int, agent_state: dict[str, Any], note: str = "") -> CallToolResult:
        async def call() -> CallToolResult:
            checkpoint = await backend_for().save_checkpoint(run_id, {"agent_state": agent_state, "note": note})
            return reply(f"Checkpoint {checkpoint['seq']} saved.", {"checkpoint_id": checkpoint["id"], "seq": checkpoint["seq"]})

        return await answered(call())

    @server.tool(description="Record a decision, open question, blocker, dependency, evidence, note or tool output.")
    async def add_record(run_id: int, kind: RecordKind, text: str, data: dict[str, Any] | None = None) -> CallToolResult:
        async def call() -> CallToolResult:
            record = await backend_for().add_record(run_id, {"kind": kind, "text": text, "data": data or {}})
            return reply(f"{kind.replace('_', ' ').capitalize()} {record['id']} recorded.", {"record_id": record["id"], "kind": record["kind"]})

        return await answered(call())

    @server.tool(description="Ask a person to approve an action; the run ends waiting for their decision.")
    async def request_approval(run_id: int, action: str, payload: dict[str, Any], reason: str) -> CallToolResult:
        async def call() -> CallToolResult:
            approval = await backend_for().request_approval(run_id, {"action": action, "payload": payload, "reason": reason})
            status = approval["status"]
            text = (
                f"Approval {approval['id']} is {status}; the run has ended. Resume the mission once a person decides."
                if status == "pending"
                else f"Approval {approval['id']} is {status} already (a standing decision)."
            )
            return reply(text, {"approval_id": approval["id"], "status": status, "approval": approval})

        return await answered(call())

    @server.tool(description="End the run: completed, blocked_external or failed_retry_budget.")
    async def stop_run(run_id: int, reason: StopReason, detail: str = "") -> CallToolResult:
        async def call() -> CallToolResult:
            run = await backend_for().stop_run(run_id, {"reason": reason, "detail": detail})
            return reply(f"Run {run['id']} stopped ({run['stop_reason']}).", {"run_id": run["id"], "stop_reason": run["stop_reason"], "run": run})

        return await answered(call())


def add_operation_tools(server: MCPServer, backend_for: BackendFor) -> None:
    @server.tool(
        description=(
            "Call before any side effect, with a key that names it for good. status `go`: the attempt is "
            "recorded, do it now, then complete_operation or fail_operation. `completed`: already done, "
            "here is the receipt; never repeat it. `reconcile`: an earlier attempt's outcome is unknown; "
            "check the target, then complete_operation, or fail_operation with retryable=true to try again."
        )
    )
    async def begin_operation(run_id: int, key: str, kind: str, target: str, request: dict[str, Any]) -> CallToolResult:
        async def call() -> CallToolResult:
            backend = backend_for()
            op = await backend.plan_operation(run_id, {"key": key, "kind": kind, "target": target, "request": request})
            found = {"operation_id": op["id"], "key": op["key"], "attempts": op["attempts"]}
            if op["status"] in ("completed", "attempted"):
                # The plan was a replay, which writes nothing: the run's heartbeat is refreshed here.
                await backend.heartbeat(run_id)
            if op["status"] == "completed":
                return reply(
                    f"Already done (operation {op['id']}): use the receipt, do not repeat it.", {**found, "status": "completed", "receipt": receipt_of(op)}
                )
            if op["status"] == "attempted":
                return reply(
                    f"Operation {op['id']} was attempted and its outcome is unknown: check {op['target']} before anything else.",
                    {**found, "status": "reconcile", "target": op["target"], "request": op["request"]},
                )
            op = await backend.attempt_operation(op["id"])
            return reply(
                f"Go: attempt {op['attempts']} of operation {op['id']} is recorded; do it now, then complete_operation.",
                {**found, "status": "go", "attempts": op["attempts"]},
            )

        return await answered(call())

    @server.tool(description="Record the receipt of a side effect that happened (accepted even after the run ended).")
    async def complete_operation(operation_id: int, external_id: str, external_status: str, receipt: dict[str, Any] | None = None) -> CallToolResult:
        async def call() -> CallToolResult:
            body = {"external_id": external_id, "external_status": external_status, "receipt": receipt or {}}
            op = await backend_for().complete_operation(operation_id, body)
            return reply(f"Operation {op['id']} completed.", {"operation_id": op["id"], "status": op["status"], "receipt": receipt_of(op)})

        return await answered(call())

    @server.tool(description="Record that a side effect failed; retryable=true lets begin_operation try it again.")
    async def fail_operation(operation_id: int, error: str, retryable: bool) -> CallToolResult:
        async def call() -> CallToolResult:
            op = await backend_for().fail_operation(operation_id, {"error": error, "retryable": retryable})
            data = {"operation_id": op["id"], "status": op["status"], "retryable": op["retryable"], "attempts": op["attempts"]}
            return reply(f"Operation {op['id']} failed{' (retryable)' if op['retryable'] else ' for good'}.", data)

        return await answered(call())


def add_briefing(server: MCPServer, backend_for: BackendFor) -> None:
    @server.prompt(
        name="resume_mission",
        title="Resume a Questlog mission",
        description="The briefing for the next session: objective, constraints, decisions, what is done, what waits, what to do next.",
    )
    async def resume_prompt(mission_id: int) -> str:
        return briefing(await bundle_of(backend_for(), mission_id))

    @server.resource(
        "questlog://missions/{mission_id}/resume",
        name="mission_resume",
        mime_type="application/json",
        description="A mission's resume bundle, as the agent API answers it.",
    )
    async def resume_resource(mission_id: int) -> str:
        return json.dumps(bundle_result(await bundle_of(backend_for(), mission_id)))


async def bundle_of(backend: Backend, mission_id: int) -> Json:
    """The bundle for the prompt and the resource, whose refusals are protocol errors (they have no
    isError result): the API's code and sentence as the message, its error object as the data.
    Another person's mission is as absent as one that never existed."""
    try:
        return await backend.resume(mission_id)
    except errors.ApiError as exc:
        code = INVALID_PARAMS if 400 <= exc.status < 500 else INTERNAL_ERROR
        raise MCPError(code, f"{exc.code}: {exc.message}", {**exc.error, "code": exc.code, "message": exc.message}) from None
    except errors.QuestlogError as exc:
        raise MCPError(INTERNAL_ERROR, f"unreachable: {exc}") from None
