"""The HTTP side of the benchmarks: a Questlog web server started the way `make serve` starts it,
an agent token for a benchmark user, and one agent's keep-alive HTTP session.

Imported after `common.setup()` (the token is made through Django, in the benchmark database)."""

import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import httpx

# Django's settings log at INFO, which would print a line per request httpx makes.
logging.getLogger("httpx").setLevel(logging.WARNING)

# make serve's own settings (QUESTLOG_WEB_WORKERS, QUESTLOG_WEB_THREADS) apply when set.
WORKERS = os.environ.get("QUESTLOG_WEB_WORKERS", "default")
# The server's snapshot requests go to this broker. In-process by default, as in common.setup():
# no worker consumes them here, so a real broker would only pile messages up.
BROKER_URL = os.environ.get("BENCH_WEB_BROKER_URL", "memory://localhost/")


@dataclass
class Server:
    url: str
    process: subprocess.Popen | None = None
    log: Path | None = None

    def stop(self) -> None:
        """Stop the server this script started (by its PID, never by name)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(port: int) -> list[str]:
    """What `make serve` runs (scripts/serve: migrate, then gunicorn with config/gunicorn.py and its
    default workers and threads), so the figures are those of the production server."""
    return [str(common.ROOT / "scripts" / "serve")]


def start_server(database_url: str) -> Server:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_DEBUG": "0",
        "CELERY_BROKER_URL": BROKER_URL,
        "PYTHON": sys.executable,
        "QUESTLOG_BIND": f"127.0.0.1:{port}",
        "QUESTLOG_WEB_ACCESS_LOG": "0",
        # DEBUG off refuses to start without a key; a throwaway one unless the run was given one.
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
    }
    log = Path(tempfile.mkstemp(prefix="questlog-bench-server-", suffix=".log")[1])
    with log.open("wb") as out:
        process = subprocess.Popen(serve_command(port), cwd=common.ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/api/v1/openapi.json", timeout=2).status_code == 200:
                common.note(f"server: {' '.join(serve_command(port)[1:])}, PID {process.pid}")
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the server did not answer within 60 s:\n{log.read_text()[-3000:]}")


def agent_token(name: str) -> str:
    """A new benchmark user and an agent token for it, straight through the service."""
    from quests.services.tokens import token_create

    _, raw = token_create(user=common.bench_user(name), name=name)
    return raw


@dataclass
class Agent:
    """One agent's keep-alive session. Every call is timed by kind; every non-2xx answer is kept.
    Records and checkpoints carry a fresh idempotency key, as questlog_client sends them."""

    url: str
    token: str
    times: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=f"{self.url}/api/v1/", timeout=30, headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json"})

    def call(self, kind: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        start = time.perf_counter()
        response = self.http.request(method, path, json=body)
        self.times.setdefault(kind, []).append(time.perf_counter() - start)
        if not 200 <= response.status_code < 300:
            self.failures.append(f"{kind} {method} {path}: {response.status_code} {response.text[:300]}")
            return None
        return response.json()

    def start(self, title: str) -> tuple[int, int] | None:
        """A new mission and a run on it: (mission id, run id)."""
        mission = self.call("mission", "POST", "missions", {"title": title, "objective": "Book a venue for 12.", "key": key()})
        if mission is None:
            return None
        started = self.call("run", "POST", f"missions/{mission['id']}/runs", {"agent": "bench", "key": key()})
        return None if started is None else (mission["id"], started["run"]["id"])

    def checkpoint(self, run_id: int, agent_state: dict[str, Any]) -> None:
        self.call("checkpoint", "POST", f"runs/{run_id}/checkpoints", {"agent_state": agent_state, "key": key()})

    def close(self) -> None:
        self.http.close()


def key() -> str:
    return uuid.uuid4().hex
