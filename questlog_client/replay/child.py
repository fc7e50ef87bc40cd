"""The agent process replaycheck starts (it calls `child_main`). It reports each
step on a pipe and traces steps and bundles to a file; at its crash point it stops right there and
waits to be killed, so the kill lands exactly after that step."""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from questlog_client.client import Questlog
from questlog_client.fake_service import FakeService
from questlog_client.missions import NOT_WORKING
from questlog_client.models import Bundle
from questlog_client.replay.scenario import AgentFn
from questlog_client.replay.steps import Step, StepWatch


def load_agent(path: str) -> AgentFn:
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"An agent is named 'module:function', not {path!r}.")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


class Reporter:
    """Hears the agent's steps and bundles: a line per step on the pipe to the harness (`W` when
    the agent waits for a person), and a JSON event per step or bundle in the trace file."""

    def __init__(self, steps: IO[str], trace: IO[str], crash_after: int) -> None:
        self.steps, self.trace, self.crash_after = steps, trace, crash_after

    def write(self, event: dict[str, Any]) -> None:
        self.trace.write(json.dumps(event, default=str) + "\n")
        self.trace.flush()

    def on_step(self, step: Step) -> None:
        self.write({"type": "step", "n": step.number, "label": step.label, "path": step.path, "answer": step.answer, "sent": step.sent, "at": time.time()})
        self.steps.write(f"{step.number}\n")
        self.steps.flush()
        if step.number == self.crash_after:
            time.sleep(300)  # the harness kills this process here; it never wakes unless the harness is gone
            os._exit(3)

    def on_bundle(self, bundle: Bundle, asked_at: float, got_at: float) -> None:
        self.write({"type": "bundle", "asked_at": asked_at, "got_at": got_at, "bundle": bundle.raw})
        if bundle.next_action in NOT_WORKING:
            self.steps.write("W\n")  # the agent waits for a person: the harness's person acts at once
            self.steps.flush()


def _leave_when_orphaned() -> None:
    # If the harness itself dies, nobody will kill this process or act as the person: leave.
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def child_main(env: Mapping[str, str] = os.environ) -> None:
    """Run the agent the harness named in the environment (QUESTLOG_REPLAY_*)."""
    steps = os.fdopen(int(env["QUESTLOG_REPLAY_STEP_FD"]), "w", buffering=1)
    trace = open(env["QUESTLOG_REPLAY_TRACE"], "a", buffering=1, encoding="utf-8")
    reporter = Reporter(steps, trace, crash_after=int(env.get("QUESTLOG_REPLAY_CRASH_AFTER") or 0))
    _leave_when_orphaned()
    sys.path.insert(0, os.getcwd())
    agent = load_agent(env["QUESTLOG_REPLAY_AGENT"])
    ql = Questlog(
        env["QUESTLOG_REPLAY_BASE_URL"],
        env["QUESTLOG_REPLAY_TOKEN"],
        heartbeat_interval=float(env.get("QUESTLOG_REPLAY_HEARTBEAT", "0.8")),
        takeover_timeout=float(env.get("QUESTLOG_REPLAY_TAKEOVER", "120")),
        poll_interval=float(env.get("QUESTLOG_REPLAY_POLL", "0.2")),
        transport=StepWatch(reporter.on_step, reporter.on_bundle),
    )
    with ql:
        agent(ql, int(env["QUESTLOG_REPLAY_MISSION"]), FakeService(env["QUESTLOG_REPLAY_SERVICE"]))
    reporter.write({"type": "finished", "at": time.time()})
