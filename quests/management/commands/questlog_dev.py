"""`make run`: the web server, a Celery worker and beat in one terminal, ended together."""

import os
import signal
import socket
import subprocess
import sys
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from quests.services.demo import DEMO_PASSWORD, DEMO_USERNAME, seed_demo

# How long to wait for the web server before printing where it is anyway.
WEB_START_SECONDS = 20


def demo_login() -> tuple[str, str] | None:
    """The demo user's name and password while they still sign in (seeded now or on an earlier run)."""
    seeded = seed_demo()
    if seeded:
        return seeded
    demo = get_user_model().objects.filter(username=DEMO_USERNAME, is_active=True).first()
    return (DEMO_USERNAME, DEMO_PASSWORD) if demo is not None and demo.check_password(DEMO_PASSWORD) else None


def ready_banner(addr: str, login: tuple[str, str] | None) -> list[str]:
    """The lines that say where Questlog is and how to sign in, framed so they stand out from the
    server's and the worker's own output."""
    lines = [f"Questlog is ready: http://{addr}/"]
    if login:
        lines.append(f"Log in as {login[0]} / {login[1]}")
    lines += [f"API docs: http://{addr}/api/v1/docs", "Ctrl-C stops the server, the worker and beat."]
    width = max(len(line) for line in lines) + 4
    rule = "=" * width
    return [rule, *(f"  {line}" for line in lines), rule]


def wait_for(addr: str, seconds: float) -> None:
    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.25)


class Command(BaseCommand):
    help = "Serve Questlog on http://127.0.0.1:8000 with a Celery worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")

    def handle(self, *args, addr, **options):
        login = demo_login()
        python = sys.executable
        # --quiet: no start-up banners from the worker and beat to bury the lines that matter.
        celery = [python, "-m", "celery", "-A", "config", "--quiet"]
        commands = {
            "web": [python, "manage.py", "runserver", addr, "--noreload"],
            "worker": [*celery, "worker", "--concurrency", "2", "--loglevel", "info"],
            "beat": [*celery, "beat", "--loglevel", "info"],
        }
        procs = {name: subprocess.Popen(cmd, env=os.environ.copy()) for name, cmd in commands.items()}
        # After the web server is up, so that its start-up lines (and the migrations before them)
        # do not bury where to go and how to sign in.
        wait_for(addr, WEB_START_SECONDS)
        self.stdout.write("\n" + "\n".join(self.style.SUCCESS(line) for line in ready_banner(addr, login)) + "\n")

        def stop(*_):
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with {proc.returncode}; stopping the rest.")
                    stop()
            time.sleep(1)
