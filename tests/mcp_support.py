"""Talking to Questlog's MCP server the way a host does: through the MCP SDK's own client, over
streamable HTTP with a bearer token (or over stdio to `questlog-mcp`). Each helper opens a client,
does its calls and closes it, so tests stay synchronous around the live server."""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult

T = TypeVar("T")

TOOLS = {
    "create_mission",
    "resume_mission",
    "start_run",
    "save_checkpoint",
    "add_record",
    "begin_operation",
    "complete_operation",
    "fail_operation",
    "request_approval",
    "stop_run",
    "list_missions",
}


@asynccontextmanager
async def connected(base_url: str, token: str | None, *, endpoint: str | None = None, headers: dict[str, str] | None = None):
    """A client of the server at `base_url` with a bearer token, or of `endpoint` with `headers`
    exactly as a host's configuration gives them."""
    if headers is None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(endpoint or base_url.rstrip("/") + "/mcp", http_client=http)) as client:
            yield client


def with_client(base_url: str, token: str | None, work: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        async with connected(base_url, token) as client:
            return await work(client)

    return asyncio.run(main())


class McpHost:
    """One client session kept open across calls, as a host keeps it for a conversation: its event
    loop runs in a thread of its own, and `call` waits for each answer."""

    def __init__(self, base_url: str, token: str | None, *, endpoint: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.base_url, self.token, self.endpoint, self.headers = base_url, token, endpoint, headers
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._closing: asyncio.Event | None = None
        self.client: Client = self._wait(self._open())

    def _wait(self, work: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=60)

    async def _open(self) -> Client:
        opened: asyncio.Future[Client] = self.loop.create_future()
        self._closing = asyncio.Event()

        async def hold() -> None:
            try:
                async with connected(self.base_url, self.token, endpoint=self.endpoint, headers=self.headers) as client:
                    opened.set_result(client)
                    await self._closing.wait()
            except BaseException as exc:  # noqa: BLE001  (reported to the caller of __init__)
                if not opened.done():
                    opened.set_exception(exc)

        self._holder = self.loop.create_task(hold())
        return await opened

    @classmethod
    def configured(cls, config: dict[str, Any]) -> "McpHost":
        """A host configured with an `mcpServers` entry of type http: its URL and headers only."""
        return cls("", None, endpoint=config["url"], headers=config["headers"])

    def call(self, name: str, **arguments: Any) -> CallToolResult:
        return self._wait(self.client.call_tool(name, arguments))

    def prompt(self, mission_id: int) -> str:
        """The `resume_mission` prompt's text."""
        prompt = self._wait(self.client.get_prompt("resume_mission", {"mission_id": str(mission_id)}))
        return prompt.messages[0].content.text

    def resource(self, mission_id: int) -> dict[str, Any]:
        """The resume resource, decoded."""
        read = self._wait(self.client.read_resource(f"questlog://missions/{mission_id}/resume"))
        return json.loads(read.contents[0].text)

    def close(self) -> None:
        async def stop() -> None:
            self._closing.set()
            await self._holder

        self._wait(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def tool(base_url: str, token: str, name: str, **arguments: Any) -> CallToolResult:
    return with_client(base_url, token, lambda client: client.call_tool(name, arguments))


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call (and its text for the model is there too)."""
    assert not result.is_error, result.content
    assert result.content and result.content[0].text
    return result.structured_content


def refused(result: CallToolResult) -> dict[str, Any]:
    """The API's error object of a tool error."""
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    assert result.content[0].text == f"{error['code']}: {error['message']}"
    return error
