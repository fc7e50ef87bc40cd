"""Replay tests: crash an agent after every step and check that it resumes the same mission.

`replaycheck(scenario, base_url=..., token=..., username=..., password=...)` runs the scenario once
uninterrupted to learn its steps (each state-changing API call and each side effect) and its side
effects, then for every crash point k: starts the agent in a subprocess, kills it with SIGKILL right
after step k, starts a fresh process that resumes from the bundle and lets it finish. Whenever the
mission waits for a person, the harness acts as that person through the people-only API. Per point
it counts:

- side effects repeated at the fake service (against the uninterrupted run),
- constraints missing from a bundle an agent process was given,
- decisions, approvals or gate reviews forgotten: missing from a bundle although made before it was
  asked for, or asked/recorded again so that the final mission has a different set of them,
- other differences between the final state and the uninterrupted run's,
- errors (an agent process that failed, hung, or never reached its crash point).

An agent is a module-level function `agent(ql: Questlog, mission_id: int, service: FakeService)`
that works until the mission is complete, waiting while a person must act. Point the check at
your own from pytest:

    def test_my_agent_survives_a_crash_at_every_step(live_server, settings):
        settings.QUESTLOG_HEARTBEAT_TIMEOUT = 1  # a killed run's heartbeat lapses within a second
        scenario = Scenario("mine", agent=my_agent, mission={"title": "…", "objective": "…"})
        report = replaycheck(scenario, base_url=live_server.url, token=token, username="alice", password="…")
        assert report.ok, report.table() + "\n" + report.details()

The person in a scenario may add constraints and decide things (`person=`, default: approve
everything that waits); a retired constraint is not expected in later bundles.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from questlog_client import scenarios
from questlog_client.people import PersonSession
from questlog_client.replay.child import child_main
from questlog_client.replay.compare import PointResult, compare
from questlog_client.replay.harness import Harness
from questlog_client.replay.scenario import AgentFn, PersonFn, Scenario, approve_everything, strip_ids
from questlog_client.replay.steps import Step, StepWatch

__all__ = [
    "Scenario",
    "PersonSession",
    "PointResult",
    "Report",
    "replaycheck",
    "parse_points",
    "strip_ids",
    "approve_everything",
    "child_main",
    "AgentFn",
    "PersonFn",
    "Step",
    "StepWatch",
]


@dataclass
class Report:
    scenario: str
    baseline_steps: list[str]
    baseline_effects: int
    baseline_seconds: float
    rows: list[PointResult]
    baseline_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.baseline_errors and all(row.ok for row in self.rows)

    def totals(self) -> dict[str, int]:
        return {
            "repeated_side_effects": sum(r.repeated_side_effects for r in self.rows),
            "constraints_missing": sum(r.constraints_missing for r in self.rows),
            "forgotten": sum(r.forgotten for r in self.rows),
            "state_differences": sum(r.state_differences for r in self.rows),
            "errors": sum(r.errors for r in self.rows) + len(self.baseline_errors),
        }

    def table(self) -> str:
        width = max([len("crashed right after step"), *(len(r.step) for r in self.rows)])
        head = f"{'point':>5}  {'crashed right after step':<{width}}  repeated  constraints  forgotten  state diffs  errors  seconds"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(
                f"{r.point:>5}  {r.step:<{width}}  {r.repeated_side_effects:>8}  {r.constraints_missing:>11}  {r.forgotten:>9}"
                f"  {r.state_differences:>11}  {r.errors:>6}  {r.seconds:>7.1f}"
            )
        t = self.totals()
        lines.append("-" * len(head))
        lines.append(
            f"{'total':>5}  {'':<{width}}  {t['repeated_side_effects']:>8}  {t['constraints_missing']:>11}  {t['forgotten']:>9}"
            f"  {t['state_differences']:>11}  {t['errors']:>6}  {self.seconds:>7.1f}"
        )
        return "\n".join(lines)

    def details(self) -> str:
        out = [f"baseline: {e}" for e in self.baseline_errors]
        for r in self.rows:
            out += [f"point {r.point} ({r.step}): {d}" for d in r.details]
        return "\n".join(out)


def parse_points(points: str | Iterable[int], total: int) -> list[int]:
    """`all`, or numbers and ranges: `3,5,9-12`."""
    if not isinstance(points, str):
        chosen = sorted(set(points))
    elif points.strip() in ("", "all"):
        chosen = list(range(1, total + 1))
    else:
        chosen = []
        for part in points.split(","):
            low, _, high = part.strip().partition("-")
            if not (low.isdigit() and (high.isdigit() or not high)):
                raise ValueError(f"Crash points are 'all' or numbers and ranges like 3,5,9-12, not {points!r}.")
            chosen += range(int(low), int(high or low) + 1)
        chosen = sorted(set(chosen))
    outside = [p for p in chosen if not 1 <= p <= total]
    if outside:
        raise ValueError(f"Crash points {outside} are outside 1–{total}: the uninterrupted run has {total} steps.")
    return chosen


Progress = Callable[[int, int, "PointResult | None"], None]


def replaycheck(
    scenario: Scenario | str,
    *,
    base_url: str | Sequence[str],
    token: str,
    username: str,
    password: str,
    points: str | Iterable[int] = "all",
    jobs: int = 3,
    heartbeat_interval: float = 0.8,
    takeover_timeout: float = 120.0,
    process_timeout: float = 180.0,
    poll: float = 0.2,
    workdir: str | Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """Crash the scenario's agent after every chosen step and compare each recovery with an
    uninterrupted run; `jobs` crash points at a time. `base_url` may list several servers on one
    database: the executions take turns. The server's QUESTLOG_HEARTBEAT_TIMEOUT decides how long
    a fresh process waits before it may take over from the killed one: keep it short on a test
    server (a second or two), or each crash point waits that long."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replaycheck-") as tmp:
        harness = Harness(
            scenario,
            base_urls=[base_url] if isinstance(base_url, str) else list(base_url),
            token=token,
            username=username,
            password=password,
            workdir=Path(workdir or tmp),
            heartbeat_interval=heartbeat_interval,
            takeover_timeout=takeover_timeout,
            process_timeout=process_timeout,
            poll=poll,
        )
        harness.workdir.mkdir(parents=True, exist_ok=True)
        try:
            report = _run_points(harness, scenario, points, jobs, progress)
        finally:
            harness.close()
    report.seconds = time.monotonic() - started
    return report


def _run_points(harness: Harness, scenario: Scenario, points: str | Iterable[int], jobs: int, progress: Progress | None) -> Report:
    baseline = harness.execute(None)
    harness.baseline_steps = baseline.steps
    report = Report(scenario.name, baseline.steps, sum(baseline.effects.values()), baseline.seconds, [], list(baseline.errors))
    if baseline.errors or not baseline.steps:
        report.baseline_errors = baseline.errors or ["the uninterrupted run took no step"]
        return report
    chosen = parse_points(points, len(baseline.steps))
    if progress:
        progress(0, len(chosen), None)
    lock = threading.Lock()

    def one(point: int) -> None:
        row = compare(baseline, harness.execute(point))
        with lock:
            report.rows.append(row)
            if progress:
                progress(len(report.rows), len(chosen), row)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        list(pool.map(one, chosen))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # interrupted: finish what runs, start nothing new
    report.rows.sort(key=lambda r: r.point)
    return report
