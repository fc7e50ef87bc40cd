"""One execution of a scenario for replaycheck: a mission, an agent process crashed right after a
chosen step (SIGKILL) and a fresh one that resumes it, a person who acts whenever the mission
waits, and what all of that left behind (steps, bundles, side effects, the final state)."""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from questlog_client import errors
from questlog_client.client import Questlog
from questlog_client.fake_service import FakeService, canonical
from questlog_client.models import Bundle
from questlog_client.people import PersonSession
from questlog_client.replay.execution import Execution
from questlog_client.replay.scenario import Scenario

CHILD = "from questlog_client.replay.child import child_main; child_main()"


class _Person(threading.Thread):
    """Acts as the person on one mission whenever it waits for them, and logs what it did and
    what it then knew (constraints, decided approvals and reviews) with the time. It looks when
    the agent says it waits (`nudge`), and every `poll` seconds besides."""

    def __init__(self, session: PersonSession, scenario: Scenario, mission_id: int, log: list[dict[str, Any]], poll: float) -> None:
        super().__init__(daemon=True, name=f"person-{mission_id}")
        self.session, self.scenario, self.mission_id, self.log, self.poll = session, scenario, mission_id, log, poll
        self.finished = threading.Event()
        self.nudged = threading.Event()
        self.failure: str | None = None

    def nudge(self) -> None:
        self.nudged.set()

    def stop(self) -> None:
        self.finished.set()
        self.nudged.set()

    def run(self) -> None:
        while not self.finished.is_set():
            self.nudged.wait(self.poll)
            self.nudged.clear()
            if self.finished.is_set():
                return
            try:
                if self.session.mission(self.mission_id)["status"] == "waiting_for_approval":
                    self.scenario.person(self.session, self.session.resume(self.mission_id))
                    self._remember(self.session.resume(self.mission_id))
            except errors.InvalidTransition:
                pass  # decided already (a second look raced the first)
            except Exception as exc:  # noqa: BLE001 - reported in the row, never silently lost
                self.failure = f"person: {type(exc).__name__}: {exc}"
                return

    def _remember(self, bundle: Bundle) -> None:
        self.log.append(
            {
                "at": time.time(),
                "constraints": [c.id for c in bundle.constraints],
                "approvals": {a.id: a.status for a in bundle.approvals if a.status != "pending"},
                "milestones": {m.id: m.review_status for m in bundle.milestones if m.review_status != "pending_review"},
            }
        )


@dataclass
class _Server:
    url: str
    ql: Questlog
    person: PersonSession


class Harness:
    def __init__(
        self,
        scenario: Scenario,
        *,
        base_urls: Sequence[str],
        token: str,
        username: str,
        password: str,
        workdir: Path,
        heartbeat_interval: float,
        takeover_timeout: float,
        process_timeout: float,
        poll: float,
    ) -> None:
        self.scenario = scenario
        self.token = token
        self.workdir = workdir
        self.heartbeat_interval = heartbeat_interval
        self.takeover_timeout = takeover_timeout
        self.process_timeout = process_timeout
        self.poll = poll
        # Several servers on one database spread the server's work over the cores; each
        # execution (its missions, its agent processes and its person) talks to one of them.
        self.servers = [_Server(url.rstrip("/"), Questlog(url, token, heartbeat_interval=0), PersonSession(url, username, password)) for url in base_urls]
        self.baseline_steps: list[str] = []
        self._turn = itertools.count()
        self._turn_lock = threading.Lock()

    def close(self) -> None:
        for server in self.servers:
            server.ql.close()
            server.person.close()

    def _server(self) -> _Server:
        with self._turn_lock:
            return self.servers[next(self._turn) % len(self.servers)]

    def execute(self, point: int | None) -> Execution:
        started = time.monotonic()
        name = "baseline" if point is None else f"point-{point:03d}"
        server = self._server()
        ex = Execution(point, base_url=server.url)
        mission = server.ql.missions.create(**self.scenario.mission)
        ex.mission_id = mission.id
        ex.initial_constraints = {c.id for c in mission.resume().constraints}
        service = FakeService(self.workdir / f"{name}.sqlite3")
        person = _Person(server.person, self.scenario, mission.id, ex.person, poll=1.0)
        person.start()
        try:
            first = self._spawn(ex, name, "1", crash_after=point, person=person)
            if point is not None and not ex.errors:
                self._spawn(ex, name, "2", crash_after=None, person=person)
        finally:
            person.stop()
            person.join(timeout=10)
        if person.failure:
            ex.errors.append(person.failure)
        ex.steps = first
        if point is not None and first[:point] != self.baseline_steps[:point] and self.baseline_steps:
            ex.errors.append("the agent's steps before the crash differ from the uninterrupted run's: it is not deterministic")
        ex.effects = Counter({self._effect(e): n for e, n in service.effects().items()})
        ex.final = self._final_state(server.ql, mission.id)
        ex.seconds = time.monotonic() - started
        return ex

    def _effect(self, effect: tuple[str, str, str]) -> tuple[str, str, str]:
        kind, target, payload = effect
        return (kind, target, canonical(self.scenario.normalize(json.loads(payload))))

    def _spawn(self, ex: Execution, name: str, proc: str, *, crash_after: int | None, person: _Person) -> list[str]:
        """Run one agent process; with `crash_after`, SIGKILL it right after that step. Answers
        the labels of the steps it reported."""
        trace = self.workdir / f"{name}-{proc}.jsonl"
        log = self.workdir / f"{name}-{proc}.log"
        read_fd, write_fd = os.pipe()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [self.scenario.import_root, os.getcwd(), os.environ.get("PYTHONPATH")])),
            "QUESTLOG_REPLAY_BASE_URL": ex.base_url,
            "QUESTLOG_REPLAY_TOKEN": self.token,
            "QUESTLOG_REPLAY_MISSION": str(ex.mission_id),
            "QUESTLOG_REPLAY_AGENT": self.scenario.agent_path,
            "QUESTLOG_REPLAY_SERVICE": str(self.workdir / f"{name}.sqlite3"),
            "QUESTLOG_REPLAY_TRACE": str(trace),
            "QUESTLOG_REPLAY_STEP_FD": str(write_fd),
            "QUESTLOG_REPLAY_CRASH_AFTER": str(crash_after or 0),
            "QUESTLOG_REPLAY_HEARTBEAT": str(self.heartbeat_interval),
            "QUESTLOG_REPLAY_TAKEOVER": str(self.takeover_timeout),
            "QUESTLOG_REPLAY_POLL": str(self.poll),
        }
        with open(log, "wb") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD],
                env=env,
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        os.close(write_fd)
        reported = self._watch(child, read_fd, crash_after, ex, f"{name} process {proc}", person)
        os.close(read_fd)
        if crash_after is not None and reported < crash_after and not ex.errors:
            ex.errors.append(f"process {proc} ended after {reported} steps, before crash point {crash_after}")
        if child.returncode not in (0, -signal.SIGKILL) or (crash_after is None and child.returncode != 0):
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            ex.errors.append(f"process {proc} exited with {child.returncode}: {' | '.join(tail)}")
        ex.events.extend(_read_trace(trace, proc))
        return [e["label"] for e in ex.events if e["type"] == "step" and e["proc"] == proc]

    def _watch(self, child: subprocess.Popen, read_fd: int, crash_after: int | None, ex: Execution, what: str, person: _Person) -> int:
        deadline = time.monotonic() + self.process_timeout
        buffer, reported = b"", 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                child.kill()
                child.wait()
                ex.errors.append(f"{what} did not finish within {self.process_timeout:.0f} s")
                return reported
            ready, _, _ = select.select([read_fd], [], [], min(remaining, 0.5))
            if person.failure:
                child.kill()
                child.wait()
                return reported
            if not ready:
                continue
            chunk = os.read(read_fd, 4096)
            if not chunk:  # the process closed the pipe: it has ended
                child.wait()
                return reported
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line == b"W":
                    person.nudge()
                    continue
                reported = int(line)
                if crash_after is not None and reported == crash_after:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                    return reported

    def _final_state(self, ql: Questlog, mission_id: int) -> dict[str, Any]:
        mission = ql.missions.get(mission_id)
        bundle = mission.resume()
        norm = self.scenario.normalize
        return {
            "status": mission.status,
            "stop_reason": mission.info.stop_reason,
            "progress": f"{mission.info.progress.approved}/{mission.info.progress.planned}",
            "next_action": bundle.next_action,
            "constraints": sorted(c.text for c in bundle.constraints),
            "decisions": sorted(r.text for r in bundle.decisions),
            "open_questions": sorted(r.text for r in bundle.open_questions),
            "blockers": sorted(r.text for r in bundle.blockers),
            "dependencies": sorted(r.text for r in bundle.dependencies),
            "milestones": sorted(f"{m.kind}: {m.title} [{m.review_status}]" for m in bundle.milestones),
            "approvals": sorted(f"{a.action} [{a.status}] {canonical(norm(a.decided_payload or a.payload))}" for a in bundle.approvals),
            "operations": sorted(
                f"{op.key} {op.kind} {op.target} [{op.status}/{op.external_status}] {canonical(norm(op.request))}" for op in bundle.operations.all()
            ),
            "agent_state": canonical(norm(bundle.agent_state)),
        }


def _read_trace(path: Path, proc: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    if not path.exists():
        return events
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append({**json.loads(line), "proc": proc})
        except ValueError:
            continue  # a line cut short by the kill
    return events
