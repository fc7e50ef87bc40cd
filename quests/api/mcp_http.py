"""`/mcp`: Questlog's MCP server over streamable HTTP, as a Django view (docs/architecture.md says
why). The bearer token is checked here, as the agent API checks it; the request is then handed
to the MCP SDK's own streamable-HTTP handler in its stateless JSON-response mode — one POST, one
JSON answer, no session kept between requests — so the same WSGI server (`runserver` for
`make run`, gunicorn's threaded workers for `make serve`) serves it beside the pages and the API.
The tools run on this request's thread (questlog_client.mcp.tools over quests/api/mcp_backend.py)."""

from collections.abc import MutableMapping
from functools import cache
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.utils import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from questlog_client.mcp.tools import build_server
from quests import storable
from quests.api import database_unavailable_response, error_response
from quests.api.mcp_backend import backend_for_request, current_actor
from quests.services.audit import Actor
from quests.services.errors import PayloadTooLarge, ServiceError
from quests.services.tokens import token_request

UNAUTHENTICATED = "Send a valid agent token (Authorization: Bearer …)."


@cache
def mcp_server() -> MCPServer:
    """One server per process: its tools, prompt and resource are the same for every token."""
    return build_server(backend_for_request)


# The tools that record an operation's receipt: counted against the rate but never refused, as on
# the API (quests/services/throttle.py): the side effect happened, and its record must not be lost.
RECEIPT_TOOLS = {"complete_operation", "fail_operation"}


def bearer_actor(request: HttpRequest) -> Actor | None:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    token = token_request(raw.strip(), receipt=is_receipt(request.body))  # the API's rate, per MCP request
    if token is None:
        return None
    return Actor(user=token.user, token=token)


def is_receipt(body: bytes) -> bool:
    """Whether the request is a call of a receipt tool (anything unreadable is not)."""
    try:
        message = storable.parse_json(body, subject="The request body")
    except storable.Unstorable:
        return False
    params = message.get("params") if isinstance(message, dict) else None
    return message.get("method") == "tools/call" and isinstance(params, dict) and params.get("name") in RECEIPT_TOOLS


def refusal(status: int, code: str, message: str, /, **extra: Any) -> HttpResponse:
    response = error_response(status, code, message, **extra)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="questlog"'
    if "retry_after" in extra:
        response["Retry-After"] = str(extra["retry_after"])
    return response


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    limit = settings.QUESTLOG_MAX_TOOL_OUTPUT_BYTES  # the largest body a tool call may carry (raw tool output)
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
            raise PayloadTooLarge(limit)
        actor = bearer_actor(request)
    except ServiceError as exc:
        return refusal(exc.status, exc.code, exc.message, **exc.extra)
    except (OperationalError, InterfaceError) as exc:
        return database_unavailable_response(exc)
    if actor is None:
        return refusal(401, "unauthenticated", UNAUTHENTICATED)
    if request.method != "POST":
        # A GET would open a server stream and a DELETE end a session: stateless, there are
        # neither, and the specification answers both with 405.
        response = refusal(405, "method_not_allowed", "This MCP server is stateless: send each JSON-RPC message as a POST.")
        response["Allow"] = "POST"
        return response
    reset = current_actor.set(actor)
    try:
        status, headers, body = async_to_sync(served)(asgi_scope(request), request.body)
    finally:
        current_actor.reset(reset)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in (b"content-length", b"transfer-encoding"):
            response[name.decode("latin-1")] = value.decode("latin-1")
    return response


def asgi_scope(request: HttpRequest) -> dict[str, Any]:
    host, port = request.get_host(), request.get_port()
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in request.headers.items()],
        "server": (host.rsplit(":", 1)[0], int(port)),
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
    }


async def served(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One request through the SDK's handler: its answer's status, headers and body. A manager per
    request, since in stateless mode it keeps nothing between requests and its task group must
    live in this request's event loop. DNS-rebinding protection stays off: Django's ALLOWED_HOSTS
    already checks the Host, and a browser cannot send the bearer token across origins."""
    manager = StreamableHTTPSessionManager(
        # The SDK's low-level server behind MCPServer: what its own streamable_http_app hands the manager.
        app=mcp_server()._lowlevel_server,
        json_response=True,
        stateless=True,
        max_request_body_size=settings.QUESTLOG_MAX_TOOL_OUTPUT_BYTES,
    )
    answered = anyio.Event()
    start: dict[str, Any] = {}
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    answered.set()
    return start["status"], list(start.get("headers", [])), b"".join(chunks)
