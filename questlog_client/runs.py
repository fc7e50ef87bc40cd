"""A run of a mission: the fencing token for every write an agent makes, kept alive by a
heartbeat thread while the agent thinks."""

from __future__ import annotations

import threading
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol

from questlog_client import errors, models
from questlog_client.core import Connection, new_key
from questlog_client.operations import SideEffects


class Mission(Protocol):
    """What a run needs of its mission (`questlog_client.missions.Mission` is one): its id and its
    resume bundle. A protocol, so this module does not import the missions module that imports it."""

    @property
    def id(self) -> int: ...

    def resume(self) -> models.Bundle: ...


class Run(SideEffects):
    """One run of a mission: the fencing token for every write, with a heartbeat thread."""

    def __init__(self, ql: Connection, mission: Mission, info: models.Run, bundle: models.Bundle, *, heartbeat_interval: float) -> None:
        self._ql = ql
        self.mission = mission
        self.info = info
        self.bundle = bundle
        self._ended = threading.Event()
        self._stop_reason: str | None = None
        # Set when the heartbeat must stop: the thread sleeps on it, so stopping wakes it at once.
        self._quiet = threading.Event()
        self._heartbeat: threading.Thread | None = None
        if heartbeat_interval > 0:
            self._heartbeat = threading.Thread(target=self._beat, args=(heartbeat_interval,), name=f"questlog-heartbeat-{info.id}", daemon=True)
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
        self._quiet.set()
        if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
            self._heartbeat.join(timeout=5)

    def _beat(self, interval: float) -> None:
        while not self._quiet.wait(interval):
            try:
                self.heartbeat()
            except errors.RunEnded:
                return
            except errors.QuestlogError:
                continue  # a missed beat is not fatal; the next one may get through

    def _mark_ended(self, stop_reason: str | None) -> None:
        self._stop_reason = stop_reason
        self._ended.set()
        self._quiet.set()

    def _call(self, method: str, path: str, body: dict[str, Any] | None, *, idempotent: bool | None = None) -> tuple[int, Any]:
        try:
            return self._ql.request(method, path, body, idempotent=idempotent)
        except errors.RunEnded as exc:
            self._mark_ended(exc.stop_reason)
            raise

    def heartbeat(self) -> models.Run:
        _, data = self._call("POST", f"runs/{self.id}/heartbeat", None, idempotent=True)
        return models.Run.from_dict(data)

    def refresh_bundle(self) -> models.Bundle:
        self.bundle = self.mission.resume()
        return self.bundle

    def record(self, kind: str, text: str, *, data: dict[str, Any] | None = None, resolves: int | None = None, key: str | None = None) -> models.Record:
        """A structured note: `decision`, `open_question`, `blocker`, `dependency`, `evidence`,
        `note` or `tool_output`. With a `key` a repeated call returns the original record."""
        body = {"kind": kind, "text": text, "data": data, "resolves": resolves, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/records", body)
        return models.Record.from_dict(answer)

    def checkpoint(self, agent_state: dict[str, Any], *, note: str | None = None, key: str | None = None) -> models.Checkpoint:
        body = {"agent_state": agent_state, "note": note, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/checkpoints", body)
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
            "kind": kind,
            "title": title,
            "summary": summary,
            "evidence": evidence or [],
            "gate": gate,
            "agent_state": agent_state,
            "key": key or new_key(),
        }
        status, answer = self._call("POST", f"runs/{self.id}/milestones", body)
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
            "action": action,
            "payload": payload,
            "reason": reason,
            "agent_state": agent_state,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "key": key or new_key(),
        }
        status, answer = self._call("POST", f"runs/{self.id}/approvals", body)
        ended = status == 201
        if ended:
            self._mark_ended("waiting_for_approval")
        return models.ApprovalRequested(models.Approval.from_dict(answer), run_ended=ended, stop_reason="waiting_for_approval" if ended else "")

    def request_approvals(self, items: list[dict[str, Any]], *, agent_state: dict[str, Any] | None = None, key: str | None = None) -> models.ApprovalsRequested:
        """Ask several questions at once (tool calls an agent wants to make together): each item
        has `action`, `payload`, `reason`, and optionally `expires_at` (a datetime) and `agent_ref`
        (the agent's own id for the question, e.g. a tool call id). The run ends once, waiting
        for all of them; one checkpoint holds `agent_state`. A replay answers the approvals as
        they are now and leaves this run going."""
        body = {
            "items": [{**item, "expires_at": item["expires_at"].isoformat() if item.get("expires_at") else None} for item in items],
            "agent_state": agent_state,
            "key": key or new_key(),
        }
        status, answer = self._call("POST", f"runs/{self.id}/approvals/batch", body)
        ended = status == 201
        if ended:
            self._mark_ended("waiting_for_approval")
        approvals = [models.Approval.from_dict(item) for item in answer["items"]]
        return models.ApprovalsRequested(approvals, run_ended=ended, stop_reason="waiting_for_approval" if ended else "")

    def propose_memory(self, name: str, value: str, reason: str, *, key: str | None = None) -> models.MemoryProposal:
        """Propose a long-term memory item; it exists only once the person approves it."""
        body = {"name": name, "value": value, "reason": reason, "key": key or new_key()}
        _, answer = self._call("POST", f"runs/{self.id}/memory-proposals", body)
        return models.MemoryProposal.from_dict(answer)

    def stop(self, reason: str, detail: str = "", *, retry_at: datetime | None = None) -> models.Run:
        """End the run: `completed`, `blocked_external` (with `retry_at`) or `failed_retry_budget`."""
        body = {"reason": reason, "detail": detail, "retry_at": retry_at.isoformat() if retry_at else None}
        _, answer = self._call("POST", f"runs/{self.id}/stop", body, idempotent=False)
        self._mark_ended(reason)
        self.close()
        return models.Run.from_dict(answer)

    def observe(self, operation: models.Operation, external_status: str, *, receipt: dict[str, Any] | None = None) -> models.Operation:
        """Record what later became of an operation's external object (e.g. `confirmed` → `cancelled`)."""
        body = {"external_status": external_status, "receipt": receipt}
        _, answer = self._call("POST", f"operations/{operation.id}/observe", body, idempotent=True)
        return models.Operation.from_dict(answer)
