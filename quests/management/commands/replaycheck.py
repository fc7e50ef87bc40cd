"""`replaycheck`: crash an agent after every step and prove it resumes the same mission.

Without --base-url it starts what it needs: a throwaway database (a new PostgreSQL database next
to the configured one when DATABASE_URL names PostgreSQL, else a SQLite file in a temp folder), a
server on a free port with a short heartbeat timeout (so a fresh agent process may take over from
the killed one within a second or two), a person to act in it, and an agent token. All of it is
removed afterwards. The machinery is questlog_client.testing; this command only sets up and prints.
"""

import ctypes
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from questlog_client import scenarios
from questlog_client.testing import PointResult, Report, Scenario, replaycheck
from quests.services.tokens import token_create

PERSON = "replaycheck"


class Command(BaseCommand):
    help = "Crash the scenario's agent right after each step (SIGKILL), resume it, and report what went wrong."

    def add_arguments(self, parser):
        parser.add_argument("--scenario", default="demo", choices=scenarios.NAMES)
        parser.add_argument("--agent", help="Replay this agent ('module:function') in the scenario instead of its own.")
        parser.add_argument("--points", default="all", help="'all', or crash points like 3,5,9-12 (step numbers).")
        parser.add_argument("--base-url", help="Check against this running server instead of a throwaway one.")
        parser.add_argument("--token", help="An agent token on --base-url.")
        parser.add_argument("--username", default=os.environ.get("QUESTLOG_USERNAME"), help="The person who acts on --base-url.")
        parser.add_argument("--password", default=os.environ.get("QUESTLOG_PASSWORD"), help="Their password (or QUESTLOG_PASSWORD).")
        parser.add_argument("--jobs", type=int, default=4, help="Crash points checked at once (default 4).")
        parser.add_argument("--servers", type=int, default=2, help="Throwaway server processes on the one database (default 2).")
        parser.add_argument("--heartbeat-timeout", type=int, default=1, help="The throwaway server's heartbeat timeout in seconds.")
        parser.add_argument("--takeover-timeout", type=float, default=120.0, help="How long a fresh agent waits for the killed run to lapse.")
        parser.add_argument("--process-timeout", type=float, default=180.0, help="Longest an agent process may take.")
        parser.add_argument("--prepare-throwaway", action="store_true", help="(internal) migrate and create the person and a token.")

    def handle(self, *args, **opts):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the table
        if opts["prepare_throwaway"]:
            return self._prepare()
        if not re.fullmatch(r"all|\d+(-\d+)?(,\d+(-\d+)?)*", opts["points"].replace(" ", "")):
            raise CommandError(f"--points is 'all' or numbers and ranges like 3,5,9-12, not {opts['points']!r}.")
        scenario = scenarios.get(opts["scenario"])
        if opts["agent"]:
            scenario = Scenario(scenario.name, opts["agent"], scenario.mission, scenario.person, scenario.normalize)
        if opts["base_url"]:
            if not (opts["token"] and opts["username"] and opts["password"]):
                raise CommandError("With --base-url, give --token, and --username and --password for the person who acts.")
            report = self._check(scenario, opts, opts["base_url"], opts["token"], opts["username"], opts["password"])
        else:
            with terminated_as_exit(), throwaway_servers(max(1, opts["servers"]), opts["heartbeat_timeout"], self.stderr) as started:
                base_urls, token, password = started
                report = self._check(scenario, opts, base_urls, token, PERSON, password)
        self._print(report)
        if not report.ok:
            raise CommandError("replaycheck found problems (see the table above).", returncode=1)

    def _check(self, scenario: Scenario, opts: dict, base_url: str | list[str], token: str, username: str, password: str) -> Report:
        where = base_url if isinstance(base_url, str) else ", ".join(base_url)
        self.stderr.write(f"replaycheck: scenario {scenario.name!r} ({scenario.agent_path}) against {where}")
        self.stderr.write("Running it once uninterrupted to learn its steps and side effects…")
        bar = ProgressBar(self.stderr._out)
        try:
            return replaycheck(
                scenario,
                base_url=base_url,
                token=token,
                username=username,
                password=password,
                points=opts["points"],
                jobs=opts["jobs"],
                takeover_timeout=opts["takeover_timeout"],
                process_timeout=opts["process_timeout"],
                progress=bar,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc

    def _print(self, report: Report) -> None:
        out = self.stdout
        out.write(
            f"\nScenario {report.scenario}: {len(report.baseline_steps)} steps and {report.baseline_effects} side effects uninterrupted "
            f"({report.baseline_seconds:.1f} s); {len(report.rows)} crash points checked in {report.seconds:.1f} s.\n"
        )
        if report.rows:
            out.write(report.table())
        details = report.details()
        if details:
            out.write("\nWhat went wrong:\n" + details)
        out.write("\nOK: every count is zero." if report.ok else "\nFAILED: see the counts above.")

    def _prepare(self) -> None:
        call_command("migrate", verbosity=0, interactive=False)
        user = get_user_model().objects.create_user(PERSON, password=os.environ["QUESTLOG_REPLAY_PASSWORD"])
        _, raw = token_create(user=user, name="replaycheck")
        self.stdout.write(raw)


class ProgressBar:
    """A progress bar on a terminal; one line per finished point elsewhere (CI logs)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, done: int, total: int, row: PointResult | None) -> None:
        width = 30
        filled = width * done // total if total else width
        line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} crash points"
        if row is not None:
            line += f"  · point {row.point} {'ok' if row.ok else 'PROBLEMS'} ({row.seconds:.1f} s)"
        if self.tty:
            self.stream.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


@contextmanager
def terminated_as_exit():
    """A terminated check still stops its servers and drops its throwaway database."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def throwaway_database(env: dict[str, str], data_dir: Path):
    """A database nobody else uses: a new PostgreSQL database beside the configured one, or (on
    the SQLite default) a file in the temp data folder. Dropped afterwards."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        env.pop("DATABASE_URL", None)  # settings then use QUESTLOG_DATA_DIR/questlog.sqlite3
        yield f"SQLite file in {data_dir}"
        return
    if "postgresql" not in engine or "DATABASE_URL" not in os.environ:
        raise CommandError(f"replaycheck makes throwaway databases on PostgreSQL or SQLite, not {engine}; use --base-url.")
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_replay_{secrets.token_hex(4)}"[-63:]
    admin: dict[str, Any] = {
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env["DATABASE_URL"] = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()
    try:
        yield f"PostgreSQL database {name}"
    finally:
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def throwaway_servers(count: int, heartbeat_timeout: int, log):
    """Yield (base_urls, token, password) of `count` fresh server processes on free ports, all on
    one throwaway database; stop and remove everything afterwards."""
    root = Path(settings.BASE_DIR)
    tmp = Path(tempfile.mkdtemp(prefix="questlog-replaycheck-"))
    password = secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "QUESTLOG_DATA_DIR": str(tmp / "data"),
        "QUESTLOG_HEARTBEAT_TIMEOUT": str(heartbeat_timeout),
        "CELERY_BROKER_URL": "filesystem://",  # nothing of the throwaway reaches a shared broker
        "DJANGO_DEBUG": "false",  # no per-query bookkeeping: the server's time goes to the check
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),  # DEBUG off needs a key; the throwaway's own
        "QUESTLOG_REPLAY_PASSWORD": password,
    }
    servers: list[subprocess.Popen] = []
    try:
        with throwaway_database(env, tmp / "data") as where:
            log.write(f"Throwaway database: {where}; migrating…")
            prepared = subprocess.run([sys.executable, "manage.py", "replaycheck", "--prepare-throwaway"], cwd=root, env=env, capture_output=True, text=True)
            if prepared.returncode != 0:
                raise CommandError(f"Could not prepare the throwaway database:\n{prepared.stderr[-2000:]}")
            token = prepared.stdout.strip().splitlines()[-1]
            try:
                urls = [_start_server(root, env, tmp / f"server-{n}.log", servers) for n in range(count)]
                for url, server, n in zip(urls, servers, range(count)):
                    _wait_until_up(url, server, tmp / f"server-{n}.log")
                log.write(f"Throwaway server{'s' if count > 1 else ''} on {', '.join(urls)} (heartbeat timeout {heartbeat_timeout} s).")
                yield urls, token, password
            finally:
                for server in servers:
                    server.terminate()
                for server in servers:
                    try:
                        server.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        server.kill()
                        server.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _start_server(root: Path, env: dict[str, str], log_path: Path, started: list[subprocess.Popen]) -> str:
    port = free_port()
    with open(log_path, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    started.append(server)
    return f"http://127.0.0.1:{port}"


def _die_with_parent() -> None:
    """In the server process: end it when replaycheck dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _wait_until_up(base_url: str, server: subprocess.Popen, server_log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CommandError(f"The throwaway server exited:\n{server_log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base_url}/accounts/login/", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.kill()
    raise CommandError("The throwaway server did not answer within 60 s.")
