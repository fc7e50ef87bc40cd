"""Missions (quests): create, read, resume, start a run, wait while a person must act."""

from __future__ import annotations

import time
from collections.abc import Callable

from questlog_client import errors, models
from questlog_client.core import Connection, new_key
from questlog_client.runs import Run

NOT_WORKING = frozenset({"await_approval", "await_user"})
WAITING_STATUSES = frozenset({"waiting_for_approval", "paused", "failed"})


class Missions:
    def __init__(self, ql: Connection) -> None:
        self._ql = ql

    def create(
        self,
        title: str,
        objective: str,
        *,
        constraints: list[str] | None = None,
        planned_milestones: list[dict[str, str]] | list[tuple[str, str]] | None = None,
        key: str | None = None,
    ) -> Mission:
        planned = [m if isinstance(m, dict) else {"kind": m[0], "title": m[1]} for m in planned_milestones or []]
        body = {"title": title, "objective": objective, "constraints": constraints or [], "planned_milestones": planned, "key": key or new_key()}
        _, data = self._ql.request("POST", "missions", body)
        return Mission(self._ql, models.Mission.from_dict(data))

    def get(self, mission_id: int) -> Mission:
        _, data = self._ql.request("GET", f"missions/{int(mission_id)}")
        return Mission(self._ql, models.Mission.from_dict(data))

    def list(self) -> list[Mission]:
        _, data = self._ql.request("GET", "missions")
        return [Mission(self._ql, models.Mission.from_dict(m)) for m in data["items"]]


class Mission:
    """A mission (a quest). `info` is what the server said last; `refresh()` asks again."""

    def __init__(self, ql: Connection, info: models.Mission) -> None:
        self._ql = ql
        self.info = info

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def status(self) -> str:
        return self.info.status

    def __repr__(self) -> str:
        return f"<Mission {self.id} {self.info.title!r} {self.status}>"

    def refresh(self) -> models.Mission:
        _, data = self._ql.request("GET", f"missions/{self.id}")
        self.info = models.Mission.from_dict(data)
        return self.info

    def resume(self) -> models.Bundle:
        """The resume bundle: what the next run may safely assume."""
        _, data = self._ql.request("GET", f"missions/{self.id}/resume")
        return models.Bundle.from_dict(data)

    def add_constraint(self, text: str, *, key: str | None = None) -> models.Constraint:
        _, data = self._ql.request("POST", f"missions/{self.id}/constraints", {"text": text, "key": key or new_key()})
        return models.Constraint.from_dict(data)

    def checkpoints(self, *, limit: int = 50, before_seq: int | None = None) -> list[models.Checkpoint]:
        query = f"?limit={int(limit)}" + (f"&before_seq={int(before_seq)}" if before_seq is not None else "")
        _, data = self._ql.request("GET", f"missions/{self.id}/checkpoints{query}")
        return [models.Checkpoint.from_dict(cp) for cp in data["items"]]

    def start_run(
        self,
        agent: str = "",
        *,
        key: str | None = None,
        takeover_timeout: float | None = None,
        heartbeat_interval: float | None = None,
    ) -> Run:
        """Start a run and its background heartbeat. Use it as a context manager: leaving the block
        normally completes the mission unless the run ended already (an approval request, a gate
        milestone, a stop, a person's pause); leaving it with an exception stops the run
        `blocked_external` with the error as detail, so the next run may start at once.

        While an earlier run still looks alive (a crashed process whose heartbeat has not lapsed
        yet), this keeps trying for `takeover_timeout` seconds before raising `RunActive`."""
        wait = self._ql.takeover_timeout if takeover_timeout is None else takeover_timeout
        deadline = time.monotonic() + wait
        body = {"agent": agent, "key": key or new_key()}
        while True:
            try:
                _, data = self._ql.request("POST", f"missions/{self.id}/runs", body)
                break
            except errors.RunActive:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(0.25, max(0.01, deadline - time.monotonic())))
        bundle = models.Bundle.from_dict(data["resume"])
        interval = self._ql.heartbeat_interval if heartbeat_interval is None else heartbeat_interval
        return Run(self._ql, self, models.Run.from_dict(data["run"]), bundle, heartbeat_interval=interval)

    def wait_for_person(
        self, *, poll: float | None = None, timeout: float | None = None, on_wait: Callable[[models.Bundle], None] | None = None
    ) -> models.Bundle:
        """While the mission waits for a person (an approval, a gate review, a pause), look again
        every `poll` seconds; answer the bundle once it no longer waits. `on_wait` hears the bundle
        the wait started with. Between looks only the mission is read, not the whole bundle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self._ql.poll_interval if poll is None else poll
        bundle = self.resume()
        if bundle.next_action not in NOT_WORKING:
            return bundle
        if on_wait is not None:
            on_wait(bundle)
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Mission {self.id} still waits for a person: {bundle.message}")
            time.sleep(poll)
            if self.refresh().status not in WAITING_STATUSES:
                bundle = self.resume()
                if bundle.next_action not in NOT_WORKING:
                    return bundle
