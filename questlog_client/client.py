"""The Questlog client for agents, on httpx.

Retries: a call is retried only when repeating it cannot do anything twice.
- A connection failure before the request was sent (connect error, connect timeout) is retried once
  for every call by httpx's own transport (`httpx.HTTPTransport(retries=1)`): nothing reached the
  server, so even an `attempt` may go again.
- Other transport errors (read timeouts, dropped connections) and 5xx answers are retried, with
  exponential backoff and jitter, only for idempotent calls: GETs, heartbeats, every POST that
  carries a `key` (the client adds a fresh one to each creating POST the caller gave none, so a
  retry replays the same request instead of creating twice), and operation receipts (`complete`,
  `fail`, `observe`), which the server accepts again as no-ops. `attempt` and `stop` are never
  retried: the first one may have happened.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from questlog_client import errors, models

NOT_WORKING = frozenset({"await_approval", "await_user"})
WAITING_STATUSES = frozenset({"waiting_for_approval", "paused", "failed"})


@dataclass(frozen=True)
class Step:
    """One thing an agent did that changed the world: a state-changing API call that succeeded,
    or a side effect an operation ran. `replaycheck` crashes agents right after one."""

    number: int
    label: str
    method: str
    path: str
    status: int
    answer: dict[str, Any] | None
    sent: dict[str, Any] | None = None


StepHook = Callable[[Step], None]
BundleHook = Callable[[models.Bundle, float, float], None]
Effect = Callable[[models.Operation], "models.Outcome | dict[str, Any]"]
Reconcile = Callable[[models.Operation], "models.Outcome | dict[str, Any] | None"]


def new_key() -> str:
    return f"ql-{uuid.uuid4().hex}"


class Questlog:
    """`Questlog(base_url, token)`: an agent's connection to a Questlog server.

    `heartbeat_interval` is how often an active run beats (keep it well under the server's
    QUESTLOG_HEARTBEAT_TIMEOUT). `takeover_timeout` is how long `start_run` keeps trying while an
    earlier run of the mission still looks alive — after a crash, that run's heartbeat must lapse
    before a new run may take over; 0 raises `RunActive` at once. `poll_interval` is how often
    `wait_for_person` looks again. `retries` and `backoff` (seconds, doubled each time) apply to
    idempotent calls only (see the module's note). `on_step` hears each state-changing call and each
    side effect, `on_bundle` each resume bundle received: that is how `replaycheck` watches an agent.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        heartbeat_interval: float = 15.0,
        takeover_timeout: float = 0.0,
        poll_interval: float = 2.0,
        on_step: StepHook | None = None,
        on_bundle: BundleHook | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.heartbeat_interval = heartbeat_interval
        self.takeover_timeout = takeover_timeout
        self.poll_interval = poll_interval
        self.on_step = on_step
        self.on_bundle = on_bundle
        self._steps = 0
        self._step_lock = threading.Lock()
        self._http = httpx.Client(
            base_url=f"{self.base_url}/api/v1/",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport or httpx.HTTPTransport(retries=1),
        )
        self.missions = Missions(self)

    def __enter__(self) -> Questlog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def memory(self) -> list[models.MemoryItem]:
        """The user's approved long-term memory."""
        _, data = self.request("GET", "memory")
        return [models.MemoryItem.from_dict(item) for item in data["items"]]

    def checkpoint(self, checkpoint_id: int) -> models.Checkpoint:
        """One checkpoint with its `agent_state` and full `state` document."""
        _, data = self.request("GET", f"checkpoints/{checkpoint_id}")
        return models.Checkpoint.from_dict(data)

    def request(
        self, method: str, path: str, json: dict[str, Any] | None = None, *, idempotent: bool | None = None, step: str | None = None
    ) -> tuple[int, Any]:
        """One API call; answers (status, decoded JSON) or raises the error's exception class.
        `step` names a state-changing call for the step hook."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD") or bool(json and json.get("key"))
        tries = 1 + (self.retries if idempotent else 0)
        for attempt in range(tries):
            last_try = attempt + 1 == tries
            try:
                response = self._http.request(method, path, json=json if method != "GET" else None)
            except httpx.TransportError as exc:
                if last_try:
                    raise errors.TransportError(f"{method} {path}: {exc!r}") from exc
                self._sleep_before_retry(attempt)
                continue
            if response.status_code >= 500 and not last_try:
                self._sleep_before_retry(attempt)
                continue
            break
        data = _decode(response)
        if response.status_code >= 400:
            raise errors.error_for(response.status_code, data)
        if step is not None:
            self.emit_step(step, method, path, response.status_code, data if isinstance(data, dict) else None, json)
        return response.status_code, data

    def emit_step(
        self, label: str, method: str, path: str, status: int = 0, answer: dict[str, Any] | None = None, sent: dict[str, Any] | None = None
    ) -> None:
        with self._step_lock:
            self._steps += 1
            step = Step(self._steps, label, method, path, status, answer, sent)
        if self.on_step is not None:
            self.on_step(step)

    def emit_bundle(self, bundle: models.Bundle, asked_at: float) -> None:
        if self.on_bundle is not None:
            self.on_bundle(bundle, asked_at, time.time())

    def _sleep_before_retry(self, attempt: int) -> None:
        delay = min(5.0, self.backoff * 2**attempt)
        time.sleep(delay * (0.5 + random.random() / 2))


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return {"error": {"code": "", "message": response.text[:500]}}


class Missions:
    def __init__(self, ql: Questlog) -> None:
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
        _, data = self._ql.request("POST", "missions", body, step="create mission")
        return Mission(self._ql, models.Mission.from_dict(data))

    def get(self, mission_id: int) -> Mission:
        _, data = self._ql.request("GET", f"missions/{int(mission_id)}")
        return Mission(self._ql, models.Mission.from_dict(data))

    def list(self) -> list[Mission]:
        _, data = self._ql.request("GET", "missions")
        return [Mission(self._ql, models.Mission.from_dict(m)) for m in data["items"]]


class Mission:
    """A mission (a quest). `info` is what the server said last; `refresh()` asks again."""

    def __init__(self, ql: Questlog, info: models.Mission) -> None:
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
        asked_at = time.time()
        _, data = self._ql.request("GET", f"missions/{self.id}/resume")
        bundle = models.Bundle.from_dict(data)
        self._ql.emit_bundle(bundle, asked_at)
        return bundle

    def add_constraint(self, text: str, *, key: str | None = None) -> models.Constraint:
        _, data = self._ql.request("POST", f"missions/{self.id}/constraints", {"text": text, "key": key or new_key()}, step="add constraint")
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
        asked_at = time.time()
        while True:
            try:
                _, data = self._ql.request("POST", f"missions/{self.id}/runs", body, step="start run")
                break
            except errors.RunActive:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(0.25, max(0.01, deadline - time.monotonic())))
                asked_at = time.time()
        bundle = models.Bundle.from_dict(data["resume"])
        self._ql.emit_bundle(bundle, asked_at)
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


class Run:
    """One run of a mission: the fencing token for every write, with a heartbeat thread."""

    def __init__(self, ql: Questlog, mission: Mission, info: models.Run, bundle: models.Bundle, *, heartbeat_interval: float) -> None:
        self._ql = ql
        self.mission = mission
        self.info = info
        self.bundle = bundle
        self._ended = threading.Event()
        self._stop_reason: str | None = None
        self._beating = threading.Event()
        self._heartbeat: threading.Thread | None = None
        if heartbeat_interval > 0:
            self._heartbeat = threading.Thread(target=self._beat, args=(heartbeat_interval,), name=f"questlog-heartbeat-{info.id}", daemon=True)
            self._beating.set()
            self._heartbeat.start()

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def ended(self) -> bool:
        """True once the run is known to have ended (by this client or as the heartbeat learnt)."""
        return self._ended.is_set()

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def __repr__(self) -> str:
        return f"<Run {self.id} of mission {self.mission.id}{' ended ' + str(self._stop_reason) if self.ended else ''}>"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
        if self.ended or isinstance(exc, errors.RunEnded):
            return
        try:
            if exc is None:
                self.stop("completed", "The agent finished its work.")
            else:
                self.stop("blocked_external", f"The agent stopped on an error: {type(exc).__name__}: {exc}"[:1000])
        except errors.QuestlogError:
            pass  # the server is gone or the run ended meanwhile; the heartbeat lapses either way

    def close(self) -> None:
        """Stop the heartbeat thread (the run itself is left as it is)."""
        self._beating.clear()
        if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
            self._heartbeat.join(timeout=5)

    def _beat(self, interval: float) -> None:
        while self._beating.is_set():
            slept = 0.0
            while slept < interval and self._beating.is_set():
                time.sleep(min(0.05, interval))
                slept += min(0.05, interval)
            if not self._beating.is_set():
                return
            try:
                self.heartbeat()
            except errors.RunEnded:
                return
            except errors.QuestlogError:
                continue  # a missed beat is not fatal; the next one may get through

    def _mark_ended(self, stop_reason: str | None) -> None:
        self._stop_reason = stop_reason
        self._ended.set()
        self._beating.clear()

    def _call(self, method: str, path: str, body: dict[str, Any] | None, *, step: str | None, idempotent: bool | None = None) -> tuple[int, Any]:
        try:
            return self._ql.request(method, path, body, step=step, idempotent=idempotent)
        except errors.RunEnded as exc:
            self._mark_ended(exc.stop_reason)
            raise

    def heartbeat(self) -> models.Run:
        _, data = self._call("POST", f"runs/{self.id}/heartbeat", None, step=None, idempotent=True)
        return models.Run.from_dict(data)

    def refresh_bundle(self) -> models.Bundle:
        self.bundle = self.mission.resume()
        return self.bundle

    def record(
        self, kind: str, text: str, *, data: dict[str, Any] | None = None, resolves: int | None = None, key: str | None = None
    ) -> models.Record:
        """A structured note: `decision`, `open_question`, `blocker`, `dependency`, `evidence`,
        `note` or `tool_output`. With a `key` a repeated call returns the original record."""
        body = {"kind": kind, "text": text, "data": data, "resolves": resolves, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/records", body, step=f"record {kind}" + (f" {key}" if key else ""))
        return models.Record.from_dict(answer)

    def checkpoint(self, agent_state: dict[str, Any], *, note: str | None = None, key: str | None = None) -> models.Checkpoint:
        body = {"agent_state": agent_state, "note": note, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/checkpoints", body, step="checkpoint" + (f" {key}" if key else ""))
        return models.Checkpoint.from_dict(answer)

    def milestone(
        self,
        kind: str,
        title: str,
        *,
        summary: str = "",
        evidence: list[int] | None = None,
        gate: bool = False,
        agent_state: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> models.MilestoneClaimed:
        """Claim a milestone for a person to review. A gate ends this run (`run_ended`) until the
        person has reviewed it; a replay of a gate an earlier run claimed does not."""
        body = {
            "kind": kind, "title": title, "summary": summary, "evidence": evidence or [], "gate": gate,
            "agent_state": agent_state, "key": key or new_key(),
        }
        status, answer = self._call("POST", f"runs/{self.id}/milestones", body, step=f"milestone {kind}" + (" (gate)" if gate else ""))
        ended = gate and status == 201
        if ended:
            self._mark_ended("waiting_for_approval")
        return models.MilestoneClaimed(models.Milestone.from_dict(answer), run_ended=ended, stop_reason="waiting_for_approval" if ended else None)

    def request_approval(
        self,
        action: str,
        payload: dict[str, Any],
        reason: str,
        *,
        agent_state: dict[str, Any] | None = None,
        expires_at: datetime | None = None,
        key: str | None = None,
    ) -> models.ApprovalRequested:
        """Ask a person before a high-stakes action. The run ends `waiting_for_approval`; the next
        run finds the decision in its bundle. A replay (same key, asked by an earlier run) leaves
        this run going and answers the approval as it is now."""
        body = {
            "action": action, "payload": payload, "reason": reason, "agent_state": agent_state,
            "expires_at": expires_at.isoformat() if expires_at else None, "key": key or new_key(),
        }
        status, answer = self._call("POST", f"runs/{self.id}/approvals", body, step="approval request")
        ended = status == 201
        if ended:
            self._mark_ended("waiting_for_approval")
        return models.ApprovalRequested(models.Approval.from_dict(answer), run_ended=ended, stop_reason="waiting_for_approval" if ended else "")

    def propose_memory(self, name: str, value: str, reason: str, *, key: str | None = None) -> models.MemoryProposal:
        """Propose a long-term memory item; it exists only once the person approves it."""
        body = {"name": name, "value": value, "reason": reason, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/memory-proposals", body, step="memory proposal")
        return models.MemoryProposal.from_dict(answer)

    def stop(self, reason: str, detail: str = "", *, retry_at: datetime | None = None) -> models.Run:
        """End the run: `completed`, `blocked_external` (with `retry_at`) or `failed_retry_budget`."""
        body = {"reason": reason, "detail": detail, "retry_at": retry_at.isoformat() if retry_at else None}
        _, answer = self._call("POST", f"runs/{self.id}/stop", body, step=f"stop {reason}", idempotent=False)
        self._mark_ended(reason)
        self.close()
        return models.Run.from_dict(answer)

    def observe(self, operation: models.Operation, external_status: str, *, receipt: dict[str, Any] | None = None) -> models.Operation:
        """Record what later became of an operation's external object (e.g. `confirmed` → `cancelled`)."""
        body = {"external_status": external_status, "receipt": receipt}
        _, answer = self._call("POST", f"operations/{operation.id}/observe", body, step=f"operation {operation.key}: observe", idempotent=True)
        return models.Operation.from_dict(answer)

    def operation(
        self,
        key: str,
        *,
        kind: str,
        target: str,
        request: dict[str, Any],
        max_attempts: int = 3,
        reconcile: Reconcile | None = None,
    ) -> OperationCall:
        """The safe way to cause a side effect. Call the answer with the effect:

            receipt = run.operation("invite", kind="email.send", target=to, request=body,
                                    reconcile=mail.lookup)(lambda op: mail.send(body, ref=op.id))

        It plans the operation (idempotency `key`, unique per mission), attempts it, runs the
        effect and records its receipt. When an earlier run completed it, the stored receipt is
        answered and the effect is not run again. When an earlier attempt was never confirmed,
        `reconcile(op)` must say whether it happened (an Outcome) or not (None) before anything is
        repeated; without a hook that is `ReconcileNeeded`."""
        return OperationCall(self, key=key, kind=kind, target=target, request=request, max_attempts=max_attempts, reconcile=reconcile)


class OperationCall:
    def __init__(self, run: Run, *, key: str, kind: str, target: str, request: dict[str, Any], max_attempts: int, reconcile: Reconcile | None) -> None:
        self.run = run
        self.key = key
        self.body = {"key": key, "kind": kind, "target": target, "request": request, "max_attempts": max_attempts}
        self.reconcile = reconcile

    def __call__(self, effect: Effect) -> models.Receipt:
        return self.perform(effect)

    def plan(self) -> models.Operation:
        _, answer = self.run._call("POST", f"runs/{self.run.id}/operations", self.body, step=f"operation {self.key}: plan")
        return models.Operation.from_dict(answer)

    def perform(self, effect: Effect) -> models.Receipt:
        op = self.plan()
        if op.status == "completed":
            return _receipt(op, replayed=True)
        if op.status == "attempted":
            if self.reconcile is None:
                raise errors.ReconcileNeeded(op)
            found = self.reconcile(op)
            if found is not None:
                return _receipt(self._complete(op, _outcome(found)), reconciled=True)
        if op.status == "failed" and op.retryable is False:
            raise errors.OperationFailed(f"Operation {self.key!r} failed for good: {op.error}", op)
        _, answer = self.run._call("POST", f"operations/{op.id}/attempt", None, step=f"operation {self.key}: attempt", idempotent=False)
        op = models.Operation.from_dict(answer)
        try:
            outcome = _outcome(effect(op))
        except errors.EffectFailed as exc:
            body = {"error": exc.error, "retryable": exc.retryable}
            self.run._call("POST", f"operations/{op.id}/fail", body, step=f"operation {self.key}: fail", idempotent=True)
            raise errors.OperationFailed(f"Operation {self.key!r} failed: {exc.error}", op) from exc
        self.run._ql.emit_step(f"operation {self.key}: side effect", "EFFECT", f"operations/{op.id}")
        return _receipt(self._complete(op, outcome))

    def _complete(self, op: models.Operation, outcome: models.Outcome) -> models.Operation:
        body = {"external_id": outcome.external_id, "external_status": outcome.external_status, "receipt": outcome.receipt}
        _, answer = self.run._call("POST", f"operations/{op.id}/complete", body, step=f"operation {self.key}: complete", idempotent=True)
        return models.Operation.from_dict(answer)


def _outcome(value: models.Outcome | dict[str, Any]) -> models.Outcome:
    if isinstance(value, models.Outcome):
        return value
    if isinstance(value, dict) and "external_id" in value and "external_status" in value:
        return models.Outcome(str(value["external_id"]), str(value["external_status"]), value.get("receipt"))
    raise TypeError("A side effect must answer an Outcome (or a dict with external_id and external_status).")


def _receipt(op: models.Operation, *, replayed: bool = False, reconciled: bool = False) -> models.Receipt:
    return models.Receipt(op, op.external_id, op.external_status, op.receipt, replayed=replayed, reconciled=reconciled)
