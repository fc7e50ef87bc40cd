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

import random
import re
import time
import uuid
from typing import Any

import httpx

from questlog_client import errors

# What `new_key` makes: a key the caller did not choose, unique to one call.
GENERATED_KEY = re.compile(r"ql-[0-9a-f]{32}")


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
        self._http = httpx.Client(
            base_url=f"{self.base_url}/api/v1/",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport or httpx.HTTPTransport(retries=1),
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, json: dict[str, Any] | None = None, *, idempotent: bool | None = None) -> tuple[int, Any]:
        """One API call; answers (status, decoded JSON) or raises the error's exception class."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD") or bool(json and json.get("key"))
        tries = 1 + (self.retries if idempotent else 0)
        for attempt in range(tries):
            last_try = attempt + 1 == tries
            try:
                response = self._http.request(method, path, json=json if method != "GET" else None)
            except httpx.TransportError as exc:
                if last_try:
                    raise errors.TransportError(f"{method} {path}: {exc!r}") from exc
                self._sleep_before_retry(attempt)
                continue
            if response.status_code >= 500 and not last_try:
                self._sleep_before_retry(attempt)
                continue
            break
        data = decode(response)
        if response.status_code >= 400:
            raise errors.error_for(response.status_code, data)
        return response.status_code, data

    def _sleep_before_retry(self, attempt: int) -> None:
        delay = min(5.0, self.backoff * 2**attempt)
        time.sleep(delay * (0.5 + random.random() / 2))


def decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return {"error": {"code": "", "message": response.text[:500]}}
