"""An MCP-driven agent for tests/test_mcp_replay.py: what a model does with Questlog's MCP tools,
scripted. It resumes the mission, starts a run, and for each planned side effect calls
`begin_operation` and acts only on `go` (reconciling an unknown outcome with the service first),
records what it did and saves a checkpoint; then it stops the run as completed.

    python -m tests.mcp_replay_agent URL TOKEN MISSION_ID SERVICE_PATH [CRASH_AFTER]

With CRASH_AFTER = n it kills itself (SIGKILL: no stop call, no goodbye) right after its n-th
step, a step being one tool call or one side effect. It prints `steps <n>` when it finishes."""

import asyncio
import os
import signal
import sys
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from questlog_client.fake_service import FakeService

EFFECTS = [
    ("reserve-venue", "reservation.hold", "lakeside", {"people": 12, "nights": 2}),
    ("email-quote", "email.send", "client@example.com", {"template": "quote"}),
    ("pay-deposit", "payment.charge", "lakeside", {"eur": 500}),
    ("email-confirm", "email.send", "team@example.com", {"template": "confirmed"}),
]


class Agent:
    def __init__(self, client: Client, service: FakeService, crash_after: int | None) -> None:
        self.client, self.service, self.crash_after = client, service, crash_after
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.crash_after is not None and self.steps >= self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        if result.is_error:
            raise SystemExit(f"{name} refused: {result.structured_content}")
        self.step()
        return result.structured_content

    def act(self, operation_id: int, kind: str, target: str, request: dict[str, Any]) -> dict[str, Any]:
        outcome = self.service.call(kind, target, request, ref=f"questlog-op-{operation_id}")
        self.step()
        return {"external_id": outcome.external_id, "external_status": outcome.external_status, "receipt": outcome.receipt}

    def found(self, operation_id: int) -> dict[str, Any] | None:
        """The reconcile question: did the call carrying this operation's reference happen?"""
        call = next((c for c in self.service.calls() if c.ref == f"questlog-op-{operation_id}"), None)
        return None if call is None else {"external_id": call.external_id, "external_status": call.status, "receipt": {"ref": call.ref}}

    async def effect(self, run_id: int, key: str, kind: str, target: str, request: dict[str, Any]) -> None:
        begun = await self.call("begin_operation", run_id=run_id, key=key, kind=kind, target=target, request=request)
        if begun["status"] == "completed":
            return  # done by an earlier run: its receipt stands, the effect is never repeated
        if begun["status"] == "reconcile":
            done = self.found(begun["operation_id"])
            if done is not None:
                await self.call("complete_operation", operation_id=begun["operation_id"], **done)
                return
            await self.call("fail_operation", operation_id=begun["operation_id"], error="never reached the service", retryable=True)
            begun = await self.call("begin_operation", run_id=run_id, key=key, kind=kind, target=target, request=request)
        assert begun["status"] == "go", begun
        outcome = self.act(begun["operation_id"], kind, target, request)
        await self.call("complete_operation", operation_id=begun["operation_id"], **outcome)

    async def work(self, mission_id: int) -> None:
        resume = await self.call("resume_mission", mission_id=mission_id)
        if resume["mission"]["status"] == "completed":
            return
        run_id = (await self.call("start_run", mission_id=mission_id, agent="mcp-replay"))["run_id"]
        done = list((resume.get("agent_state") or {}).get("done", []))
        for key, kind, target, request in EFFECTS:
            await self.effect(run_id, key, kind, target, request)
            if key not in done:
                done.append(key)
                await self.call("add_record", run_id=run_id, kind="note", text=f"{key} done")
            await self.call("save_checkpoint", run_id=run_id, agent_state={"done": done}, note=key)
        await self.call("stop_run", run_id=run_id, reason="completed", detail="every effect done once")


async def main(url: str, token: str, mission_id: int, service_path: str, crash_after: int | None) -> int:
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url.rstrip("/") + "/mcp", http_client=http)) as client:
            agent = Agent(client, FakeService(service_path), crash_after)
            await agent.work(mission_id)
            return agent.steps


if __name__ == "__main__":
    url, token, mission, service = sys.argv[1:5]
    crash = int(sys.argv[5]) if len(sys.argv) > 5 else None
    print(f"steps {asyncio.run(main(url, token, int(mission), service, crash))}", flush=True)
