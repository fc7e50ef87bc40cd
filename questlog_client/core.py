"""The HTTP core of the client: one connection to a Questlog server, its calls, their retries and
the mapping of error answers to exception classes.

Retries: a call is retried only when repeating it cannot do anything twice.
- A connection failure before the request was sent (connect error, connect timeout) is retried once
  for every call by httpx's own transport (`httpx.HTTPTransport(retries=1)`): nothing reached the
  server, so even an `attempt` may go again.
- Other transport errors (read timeouts, dropped connections) and 5xx answers are retried, with
  exponential backoff and jitter, only for idempotent calls: GETs, heartbeats, every POST that
  carries a `key` (the client adds a fresh one to each creating POST the caller gave none, so a
  retry replays the same request instead of creating twice), and operation receipts (`complete`,
  `fail`, `observe`), which the server accepts again as no-ops. `attempt` and `stop` are never
  retried: the first one may have happened.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from json import dumps as json_dumps
from typing import Any

import httpx
import orjson

from questlog_client import errors

USER_AGENT = b"questlog-client"
# How many parsed URLs a connection keeps (a run's few paths; a long agent's many runs start over).
URLS_KEPT = 256
# What `new_key` makes: a key the caller did not choose, unique to one call.
GENERATED_KEY = re.compile(r"ql-[0-9a-f]{32}")
JSON_CONTENT_TYPE = "application/json"
# What orjson hands back to us (and so refuses, having no `default`) instead of writing it its own
# way: dataclasses, dates and times, and subclasses of str, int, dict and list (an Enum of str).
_AS_JSON_WRITES = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def new_key() -> str:
    return f"ql-{uuid.uuid4().hex}"


def is_generated_key(key: object) -> bool:
    return isinstance(key, str) and GENERATED_KEY.fullmatch(key) is not None


class Connection:
    """The calls of one agent token against one server, with the agent's pacing settings that
    missions and runs read (see `Questlog`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        heartbeat_interval: float = 15.0,
        takeover_timeout: float = 0.0,
        poll_interval: float = 2.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.heartbeat_interval = heartbeat_interval
        self.takeover_timeout = takeover_timeout
        self.poll_interval = poll_interval
        self._transport = transport or httpx.HTTPTransport(retries=1)
        self._http = httpx.Client(
            base_url=f"{self.base_url}/api/v1/",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=self._transport,
        )
        self._headers = [(b"Authorization", f"Bearer {token}".encode()), (b"Accept", b"application/json"), (b"User-Agent", USER_AGENT)]
        self._json_headers = [*self._headers, (b"Content-Type", JSON_CONTENT_TYPE.encode())]
        self._extensions = {"timeout": self._http.timeout.as_dict()}
        self._urls: dict[str, httpx.URL] = {}

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, json: dict[str, Any] | None = None, *, idempotent: bool | None = None) -> tuple[int, Any]:
        """One API call; answers (status, decoded JSON) or raises the error's exception class."""
        for attempt in range(self._tries(method, json, idempotent)):
            response, failure = sent(self._send, method, path, json)
            if (delay := self._retry_delay(attempt, method, json, idempotent, response)) is None:
                return answer(method, path, response, failure)
            time.sleep(delay)
        raise AssertionError("unreachable: the last try always answers")

    def _send(self, method: str, path: str, json: dict[str, Any] | None = None) -> httpx.Response:
        """One request, handed to the transport as `httpx.Client.request` would build it (the base
        URL, the token, the JSON body, the timeout), without the client's cookie, auth and redirect
        handling, which an agent's calls never use: that handling was a third of the client's CPU
        per call (a LangGraph put's, profiled)."""
        headers, content = (self._headers, None) if json is None else (self._json_headers, json_body(json))
        request = httpx.Request(method, self._url(path), headers=headers, content=content, extensions=self._extensions)
        response = self._transport.handle_request(request)
        try:
            response.read()
        finally:
            response.close()
        return response

    def _url(self, path: str) -> httpx.URL:
        """The API's URL of `path`, parsed once for the paths an agent calls again and again."""
        url = self._urls.get(path)
        if url is None:
            if len(self._urls) >= URLS_KEPT:
                self._urls.clear()
            url = self._urls[path] = httpx.URL(f"{self.base_url}/api/v1/{path}")
        return url

    def _tries(self, method: str, json: dict[str, Any] | None, idempotent: bool | None) -> int:
        if idempotent is None:
            idempotent = method in ("GET", "HEAD") or bool(json and json.get("key"))
        return 1 + (self.retries if idempotent else 0)

    def _retry_delay(self, attempt: int, method: str, json: dict[str, Any] | None, idempotent: bool | None, response: httpx.Response | None) -> float | None:
        """How long to wait before trying again (exponential backoff with jitter), or None when
        this try's outcome is the answer: a success or client error, or the last try."""
        if attempt + 1 >= self._tries(method, json, idempotent):
            return None
        if response is not None and response.status_code < 500:
            return None
        delay = min(5.0, self.backoff * 2**attempt)
        return delay * (0.5 + random.random() / 2)


class AsyncConnection:
    """The calls of a `Connection` (its server, token, timeout and retry policy) on an
    `httpx.AsyncClient`, for the adapters' async methods: the event loop is never blocked and no
    worker thread is used. A client's connections belong to the event loop that opened them, so
    each loop gets its own client."""

    def __init__(self, connection: Connection, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.connection = connection
        self._transport = transport
        self._async_http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._async_http is None or self._loop is not loop:
            # A client of a loop that has ended cannot be closed from this one; its sockets go
            # with it.
            http = self.connection._http
            self._async_http = httpx.AsyncClient(
                base_url=http.base_url,
                headers=http.headers,
                timeout=http.timeout,
                transport=self._transport or httpx.AsyncHTTPTransport(retries=1),
            )
            self._loop = loop
        return self._async_http

    async def arequest(self, method: str, path: str, json: dict[str, Any] | None = None, *, idempotent: bool | None = None) -> tuple[int, Any]:
        """`request`, awaited."""
        policy = self.connection
        for attempt in range(policy._tries(method, json, idempotent)):
            response, failure = await asent(self._client().request, method, path, json)
            if (delay := policy._retry_delay(attempt, method, json, idempotent, response)) is None:
                return answer(method, path, response, failure)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last try always answers")

    async def aclose(self) -> None:
        if self._async_http is not None and self._loop is asyncio.get_running_loop():
            await self._async_http.aclose()
        self._async_http = None


Outcome = tuple[httpx.Response | None, httpx.TransportError | None]


def sent(send: Any, method: str, path: str, json: dict[str, Any] | None) -> Outcome:
    """One try: its response, or the transport error that kept it from one."""
    try:
        return send(method, path, json=json if method != "GET" else None), None
    except httpx.TransportError as exc:
        return None, exc


async def asent(send: Any, method: str, path: str, json: dict[str, Any] | None) -> Outcome:
    body = {"content": json_body(json), "headers": {"Content-Type": JSON_CONTENT_TYPE}} if json is not None and method != "GET" else {}
    try:
        return await send(method, path, **body), None
    except httpx.TransportError as exc:
        return None, exc


def json_body(value: Any) -> bytes:
    """The JSON text of a request's body, as httpx writes `json=` (json.dumps, compact, NaN and
    infinities refused, UTF-8), written by orjson when it surely writes the same value: json took
    ~0.1 ms of an agent's CPU for a checkpoint's 12 KB, orjson a tenth of it, and reading the text
    back to compare it with the value costs less than the difference. Where orjson would write
    something json refuses or writes otherwise (NaN and infinities as null, a UUID or an Enum as its
    value, a tuple, a key that is not text, an integer past 64 bits), the value is written, or
    refused, by json as before."""
    try:
        written = orjson.dumps(value, option=_AS_JSON_WRITES)
    except orjson.JSONEncodeError:
        return _json_as_httpx_writes(value)
    if orjson.loads(written) != value:
        return _json_as_httpx_writes(value)
    return written


def _json_as_httpx_writes(value: Any) -> bytes:
    return json_dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def answer(method: str, path: str, response: httpx.Response | None, failure: httpx.TransportError | None) -> tuple[int, Any]:
    """A try's outcome as the caller gets it: (status, decoded JSON), or the error's exception."""
    if response is None:
        raise errors.TransportError(f"{method} {path}: {failure!r}") from failure
    data = decode(response)
    if response.status_code >= 400:
        raise errors.error_for(response.status_code, data)
    return response.status_code, data


def decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return {"error": {"code": "", "message": response.text[:500]}}
