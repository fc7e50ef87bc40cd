"""Real processes for the tests that need them (Celery workers, API servers, management
commands): started by a test with the test database and broker in their environment, logging to a
file, and stopped by that test by their pid (the `processes` fixture in tests/conftest.py)."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from django.conf import settings as django_settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """The test database (not the one named in DATABASE_URL): what the subprocesses must use."""
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Process:
    """A subprocess of this test, logging to a file, stopped by pid."""

    def __init__(self, name: str, cmd: list[str], tmp_path: Path, **env: str) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.log"
        environment = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
            "QUESTLOG_DATA_DIR": str(tmp_path / "data"),
            "QUESTLOG_SNAPSHOT_INTERVAL": "1",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return text in self.output()

        wait_for(seen, timeout, f"{text!r} from {self.name}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def probed(probe: str, *command: str) -> list[str]:
    """A command run under one of tests/process_probes.py's test-only probes."""
    return [sys.executable, "-m", "tests.process_probes", probe, *command]


class Worker(Process):
    def __init__(
        self,
        tmp_path: Path,
        name: str,
        *,
        beat: bool = False,
        hold_snapshots: bool = False,
        queues: str | None = "snapshots,maintenance",
        **env: str,
    ) -> None:
        # queues=None: no -Q at all, as an operator following Celery's own docs starts a worker.
        celery = ["-m", "celery", "-A", "config", "worker", *(["-Q", queues] if queues else [])]
        cmd = [
            *(probed("hold-snapshots", *celery) if hold_snapshots else [sys.executable, *celery]),
            # solo: the task runs in the worker process itself, so SIGKILL really kills it mid-task.
            "--pool",
            "solo",
            "-n",
            f"{name}-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ]
        if beat:
            cmd += ["--beat", "--schedule", str(tmp_path / f"{name}-beat-schedule")]
        super().__init__(name, cmd, tmp_path, **env)
        self.wait_for_output(" ready.")


class ApiServer(Process):
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        # Every sleep of the server is reported: that is how a publish waits on a broker that is down.
        cmd = probed("record-sleeps", "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload")
        super().__init__("api", cmd, tmp_path, **env)
        self.url = f"http://127.0.0.1:{self.port}/api/v1/"

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"api exited:\n{self.output()[-3000:]}")
            try:
                return httpx.get(self.url + "openapi.json", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "the API server")
