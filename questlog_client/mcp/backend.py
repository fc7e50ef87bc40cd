"""What the MCP tools need of Questlog, as the agent API's own calls: each method takes the API's
request body and answers the API's JSON (docs/api.md), or raises the API's error as
`questlog_client.errors.ApiError`. Two backends keep that contract: the server's own
(`quests/api/mcp_backend.py`, services called in-process for `/mcp`) and `HttpBackend` here (the
HTTP API, for the `questlog-mcp` stdio command)."""

from __future__ import annotations

from typing import Any, Protocol

from questlog_client.core import AsyncConnection, Connection, new_key

Json = dict[str, Any]


class Backend(Protocol):
    async def create_mission(self, body: Json) -> Json: ...
    async def list_missions(self) -> list[Json]: ...
    async def resume(self, mission_id: int) -> Json: ...
    async def start_run(self, mission_id: int, body: Json) -> Json: ...
    async def heartbeat(self, run_id: int) -> Json: ...
    async def save_checkpoint(self, run_id: int, body: Json) -> Json: ...
    async def add_record(self, run_id: int, body: Json) -> Json: ...
    async def plan_operation(self, run_id: int, body: Json) -> Json: ...
    async def attempt_operation(self, operation_id: int) -> Json: ...
    async def complete_operation(self, operation_id: int, body: Json) -> Json: ...
    async def fail_operation(self, operation_id: int, body: Json) -> Json: ...
    async def request_approval(self, run_id: int, body: Json) -> Json: ...
    async def stop_run(self, run_id: int, body: Json) -> Json: ...


class HttpBackend:
    """The agent API over HTTP with one token (`questlog_client.core`: its retries for idempotent
    calls only). Every creating call carries a fresh `key`, so a retry after a dropped answer
    replays what the first try made instead of making it twice."""

    def __init__(self, base_url: str, token: str, **connection: Any) -> None:
        self.http = AsyncConnection(Connection(base_url, token, **connection))

    async def _post(self, path: str, body: Json | None, *, creates: bool = False, idempotent: bool | None = None) -> Json:
        if creates:
            body = {**(body or {}), "key": new_key()}
        _, answer = await self.http.arequest("POST", path, body, idempotent=idempotent)
        return answer

    async def _get(self, path: str) -> Any:
        _, answer = await self.http.arequest("GET", path)
        return answer

    async def create_mission(self, body: Json) -> Json:
        return await self._post("missions", body, creates=True)

    async def list_missions(self) -> list[Json]:
        return (await self._get("missions"))["items"]

    async def resume(self, mission_id: int) -> Json:
        return await self._get(f"missions/{mission_id}/resume")

    async def start_run(self, mission_id: int, body: Json) -> Json:
        return await self._post(f"missions/{mission_id}/runs", body, creates=True)

    async def heartbeat(self, run_id: int) -> Json:
        return await self._post(f"runs/{run_id}/heartbeat", None, idempotent=True)

    async def save_checkpoint(self, run_id: int, body: Json) -> Json:
        return await self._post(f"runs/{run_id}/checkpoints", body, creates=True)

    async def add_record(self, run_id: int, body: Json) -> Json:
        return await self._post(f"runs/{run_id}/records", body, creates=True)

    async def plan_operation(self, run_id: int, body: Json) -> Json:
        return await self._post(f"runs/{run_id}/operations", body)  # its own key makes it idempotent

    async def attempt_operation(self, operation_id: int) -> Json:
        return await self._post(f"operations/{operation_id}/attempt", None, idempotent=False)

    async def complete_operation(self, operation_id: int, body: Json) -> Json:
        return await self._post(f"operations/{operation_id}/complete", body, idempotent=True)

    async def fail_operation(self, operation_id: int, body: Json) -> Json:
        return await self._post(f"operations/{operation_id}/fail", body, idempotent=True)

    async def request_approval(self, run_id: int, body: Json) -> Json:
        return await self._post(f"runs/{run_id}/approvals", body, creates=True)

    async def stop_run(self, run_id: int, body: Json) -> Json:
        return await self._post(f"runs/{run_id}/stop", body, idempotent=False)

    async def aclose(self) -> None:
        await self.http.aclose()
