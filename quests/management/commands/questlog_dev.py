"""`make run`: the web server, a Celery worker and beat in one terminal, ended together."""

import os
import signal
import subprocess
import sys
import time

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve Questlog on http://127.0.0.1:8000 with a Celery worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")

    def handle(self, *args, addr, **options):
        call_command("questlog_seed_demo")
        python = sys.executable
        celery = [python, "-m", "celery", "-A", "config"]
        commands = {
            "web": [python, "manage.py", "runserver", addr, "--noreload"],
            "worker": [*celery, "worker", "--concurrency", "2", "--loglevel", "info"],
            "beat": [*celery, "beat", "--loglevel", "info"],
        }
        procs = {name: subprocess.Popen(cmd, env=os.environ.copy()) for name, cmd in commands.items()}
        self.stdout.write(f"Questlog is on http://{addr}/ (API docs at /api/v1/docs). Ctrl-C stops everything.")

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
