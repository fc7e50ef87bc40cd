"""The engine of `replaycheck` (see questlog_client.testing): the agent process with its step
reports and its crash point, one execution of a scenario (uninterrupted or crashed after a step),
and the comparison of an execution with the uninterrupted one."""

from __future__ import annotations

import importlib
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from questlog_client import errors
from questlog_client.client import NOT_WORKING, Questlog
from questlog_client.fake_service import FakeService, canonical
from questlog_client.models import Bundle
from questlog_client.people import PersonSession

if TYPE_CHECKING:
    from questlog_client.testing import Scenario

AgentFn = Callable[[Questlog, int, FakeService], Any]


def load_agent(path: str) -> AgentFn:
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"An agent is named 'module:function', not {path!r}.")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def child_main() -> None:
    """The agent process replaycheck starts. It reports each step on a pipe; at its crash point
    it stops there and waits to be killed, so the kill lands exactly after that step."""
    env = os.environ
    crash_after = int(env.get("QUESTLOG_REPLAY_CRASH_AFTER") or 0)
    steps = os.fdopen(int(env["QUESTLOG_REPLAY_STEP_FD"]), "w", buffering=1)
    trace = open(env["QUESTLOG_REPLAY_TRACE"], "a", buffering=1, encoding="utf-8")

    def write(event: dict[str, Any]) -> None:
        trace.write(json.dumps(event, default=str) + "\n")
        trace.flush()

    def on_step(step: Any) -> None:
        write({"type": "step", "n": step.number, "label": step.label, "path": step.path, "answer": step.answer, "sent": step.sent, "at": time.time()})
        steps.write(f"{step.number}\n")
        steps.flush()
        if step.number == crash_after:
            time.sleep(300)  # the harness kills this process here; it never wakes unless the harness is gone
            os._exit(3)

    parent = os.getppid()

    def orphaned() -> None:
        # If the harness itself dies, nobody will kill this process or act as the person: leave.
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(3)

    threading.Thread(target=orphaned, daemon=True).start()

    def on_bundle(bundle: Bundle, asked_at: float, got_at: float) -> None:
        write({"type": "bundle", "asked_at": asked_at, "got_at": got_at, "bundle": bundle.raw})
        if bundle.next_action in NOT_WORKING:
            steps.write("W\n")  # the agent waits for a person: the harness's person acts at once
            steps.flush()

    sys.path.insert(0, os.getcwd())
    agent = load_agent(env["QUESTLOG_REPLAY_AGENT"])
    ql = Questlog(
        env["QUESTLOG_REPLAY_BASE_URL"], env["QUESTLOG_REPLAY_TOKEN"],
        heartbeat_interval=float(env.get("QUESTLOG_REPLAY_HEARTBEAT", "0.8")),
        takeover_timeout=float(env.get("QUESTLOG_REPLAY_TAKEOVER", "120")),
        poll_interval=float(env.get("QUESTLOG_REPLAY_POLL", "0.2")),
        on_step=on_step, on_bundle=on_bundle,
    )
    with ql:
        agent(ql, int(env["QUESTLOG_REPLAY_MISSION"]), FakeService(env["QUESTLOG_REPLAY_SERVICE"]))
    write({"type": "finished", "at": time.time()})




@dataclass
class Execution:
    point: int | None
    base_url: str = ""
    mission_id: int = 0
    steps: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    person: list[dict[str, Any]] = field(default_factory=list)
    initial_constraints: set[int] = field(default_factory=set)
    effects: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    final: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


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
        self.log.append({
            "at": time.time(),
            "constraints": [c.id for c in bundle.constraints],
            "approvals": {a.id: a.status for a in bundle.approvals if a.status != "pending"},
            "milestones": {m.id: m.review_status for m in bundle.milestones if m.review_status != "pending_review"},
        })


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
        self.servers = [
            _Server(url.rstrip("/"), Questlog(url, token, heartbeat_interval=0), PersonSession(url, username, password))
            for url in base_urls
        ]
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
                [sys.executable, "-c", "from questlog_client.replay import child_main; child_main()"],
                env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
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
                f"{op.key} {op.kind} {op.target} [{op.status}/{op.external_status}] {canonical(norm(op.request))}"
                for op in bundle.operations.all()
            ),
            "agent_state": canonical(norm(bundle.agent_state)),
        }


def _read_trace(path: Path, proc: str) -> list[dict[str, Any]]:
    events = []
    if not path.exists():
        return events
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append({**json.loads(line), "proc": proc})
        except ValueError:
            continue  # a line cut short by the kill
    return events



FORGETTABLE = ("decisions", "approvals", "milestones")


@dataclass
class PointResult:
    point: int
    step: str
    repeated_side_effects: int = 0
    constraints_missing: int = 0
    forgotten: int = 0
    state_differences: int = 0
    errors: int = 0
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.repeated_side_effects or self.constraints_missing or self.forgotten or self.state_differences or self.errors)


def _multiset_diff(a: Iterable[str], b: Iterable[str]) -> tuple[list[str], list[str]]:
    ca, cb = Counter(a), Counter(b)
    return sorted((ca - cb).elements()), sorted((cb - ca).elements())


def compare(baseline: Execution, ex: Execution) -> PointResult:
    assert ex.point is not None
    label = baseline.steps[ex.point - 1] if ex.point <= len(baseline.steps) else "?"
    row = PointResult(ex.point, label, seconds=ex.seconds)
    row.errors = len(ex.errors)
    row.details += ex.errors
    for effect, count in ex.effects.items():
        extra = count - max(1, baseline.effects.get(effect, 0))
        if extra > 0:
            row.repeated_side_effects += extra
            row.details.append(f"side effect done {count}× (uninterrupted: {baseline.effects.get(effect, 0)}×): {effect[0]} → {effect[1]}")
    for effect, count in baseline.effects.items():
        missing = count - ex.effects.get(effect, 0)
        if missing > 0:
            row.state_differences += missing
            row.details.append(f"side effect done {ex.effects.get(effect, 0)}× (uninterrupted: {count}×): {effect[0]} → {effect[1]}")
    for effect in ex.effects.keys() - baseline.effects.keys():
        row.state_differences += 1
        row.details.append(f"side effect not in the uninterrupted run: {effect[0]} → {effect[1]} {effect[2][:80]}")
    _check_bundles(ex, row)
    for key, expected in baseline.final.items():
        actual = ex.final.get(key)
        if isinstance(expected, list):
            missing, extra = _multiset_diff(expected, actual or [])
            count = len(missing) + len(extra)
            if key in FORGETTABLE:
                row.forgotten += count
            else:
                row.state_differences += count
            row.details += [f"{key}: missing {m!r}" for m in missing] + [f"{key}: extra {e!r}" for e in extra]
        elif actual != expected:
            row.state_differences += 1
            row.details.append(f"{key}: {actual!r}, uninterrupted: {expected!r}")
    return row


def _check_bundles(ex: Execution, row: PointResult) -> None:
    """Every bundle an agent process was given must hold what was known before it asked: the
    constraints, the unresolved decisions, the approvals and what the person decided."""
    known_constraints: list[tuple[float, set[int]]] = [(0.0, set(ex.initial_constraints))]
    decided: list[tuple[float, dict[str, dict[int, str]]]] = []
    for entry in ex.person:
        known_constraints.append((entry["at"], set(entry["constraints"])))
        decided.append((entry["at"], {"approvals": {int(k): v for k, v in entry["approvals"].items()},
                                      "milestones": {int(k): v for k, v in entry["milestones"].items()}}))
    decisions: dict[int, float] = {}
    resolved: dict[int, float] = {}
    approvals: dict[int, float] = {}
    events = sorted(ex.events, key=lambda e: e.get("at", e.get("asked_at", 0.0)))
    for event in events:
        if event["type"] == "step":
            answer, sent = event.get("answer") or {}, event.get("sent") or {}
            if event["path"].endswith("/records") and answer.get("kind") == "decision":
                decisions.setdefault(answer["id"], event["at"])
            if event["path"].endswith("/records") and sent.get("resolves"):
                resolved.setdefault(sent["resolves"], event["at"])
            if event["path"].endswith("/approvals"):
                approvals.setdefault(answer["id"], event["at"])
        elif event["type"] == "bundle":
            asked, bundle = event["asked_at"], event["bundle"]
            known_constraints.append((event["got_at"], {c["id"] for c in bundle["constraints"]}))
            _check_one_bundle(bundle, asked, known_constraints, decided, decisions, resolved, approvals, row)


def _check_one_bundle(
    bundle: dict[str, Any],
    asked: float,
    known_constraints: list[tuple[float, set[int]]],
    decided: list[tuple[float, dict[str, dict[int, str]]]],
    decisions: dict[int, float],
    resolved: dict[int, float],
    approvals: dict[int, float],
    row: PointResult,
) -> None:
    have = {c["id"] for c in bundle["constraints"]}
    # The newest snapshot from before this bundle was asked for (a person's, or an earlier bundle's)
    # is what it must hold at least: so a constraint a person retired is not expected any more.
    expected = max(((at, ids) for at, ids in known_constraints if at < asked), key=lambda pair: pair[0])[1]
    for cid in sorted(expected - have):
        row.constraints_missing += 1
        row.details.append(f"constraint {cid} missing from a bundle")
    have_decisions = {r["id"] for r in bundle["decisions"]}
    for rid, at in decisions.items():
        if at < asked and rid not in have_decisions and not (rid in resolved and resolved[rid] < asked):
            row.forgotten += 1
            row.details.append(f"decision {rid} missing from a bundle")
    have_approvals = {a["id"]: a["status"] for a in bundle["approvals"]}
    for aid, at in approvals.items():
        if at < asked and aid not in have_approvals:
            row.forgotten += 1
            row.details.append(f"approval {aid} missing from a bundle")
    reviews = {m["id"]: m["review_status"] for m in bundle["milestones"]}
    for at, done in decided:
        if at >= asked:
            continue
        for aid, status in done["approvals"].items():
            if have_approvals.get(aid) != status:
                row.forgotten += 1
                row.details.append(f"approval {aid} was {status}, a bundle said {have_approvals.get(aid)}")
        for mid, status in done["milestones"].items():
            if reviews.get(mid) != status:
                row.forgotten += 1
                row.details.append(f"milestone {mid} was {status}, a bundle said {reviews.get(mid)}")
