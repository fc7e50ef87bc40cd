"""What a person decides about a graph, and what a node must not do twice.

An `interrupt(value)` becomes an approval: `action`, `payload` and `reason` come from `value` when it
is a dict with those keys, otherwise the whole value is the payload. `resume_command` turns the
person's decisions into the `Command` that continues the graph. `operation` runs a node's external
side effect through the mission's operation ledger: LangGraph re-runs an interrupted node from its
start, and the ledger answers the stored receipt instead of doing it again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.types import RESUME
from langgraph.pregel._task_status import read_task_statuses
from langgraph.types import Command

from questlog_client import errors, models
from questlog_client.core import Connection
from questlog_client.langgraph import codec
from questlog_client.operations import OperationCall, Reconcile, SideEffects


class ThreadSaver(Protocol):
    """What the Questlog side needs of the saver it is mixed into (`QuestlogSaver`): its connection,
    its reads and writes, and LangGraph's `get_tuple`. Named here, so this module need not import
    the saver that imports it."""

    connection: Connection

    def _get(self, path: str, **query: Any) -> Any: ...

    def _post(self, path: str, body: dict[str, Any]) -> Any: ...

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    def _thread(self, config: RunnableConfig, refs: list[str] | None = None) -> dict[str, Any]: ...

    def pending_interrupts(self, config: RunnableConfig) -> list[Any]: ...


DEFAULT_ACTION = "continue the graph"
DEFAULT_REASON = "The graph stopped to ask a person before going on."
# A config's key for an existing mission to hold a new thread: {"thread_id": …, "questlog_mission_id": 7}.
MISSION_KEY = "questlog_mission_id"
# A mission in one of these states must not be resumed: a person stopped it.
STOPPED = ("paused", "cancelled", "failed", "completed")
# approval status -> the decision the graph is resumed with
DECISIONS = {"approved": "approved", "edited": "approved", "rejected": "rejected", "expired": "rejected"}
# How LangGraph's task path starts for a node the graph runs itself (langgraph's private PULL).
PULL = "__pregel_pull"


def approvals_asked(interrupts: Any) -> list[dict[str, Any]]:
    """The approvals LangGraph's `__interrupt__` write asks for, one per interrupt."""
    asked = []
    for interrupt in interrupts if isinstance(interrupts, (list, tuple)) else [interrupts]:
        value = getattr(interrupt, "value", interrupt)
        interrupt_id = getattr(interrupt, "id", None)
        if not interrupt_id:
            continue
        asked.append({"id": str(interrupt_id), **_question(value)})
    return asked


def asked_where(task_path: str, writes: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """Which node asks (a node the graph pulled names itself in its task path; a `Send` does not)
    and which of its questions this is: a node answered k times before writes those k answers
    (`__resume__`) with its next interrupt, since LangGraph re-runs it from its start."""
    parts = task_path.lstrip("~").split(", ")
    node = parts[1] if len(parts) > 1 and parts[0] == PULL else ""
    answered = [value for channel, value in writes if channel == RESUME and isinstance(value, list)]
    return {"node": node[:200], "question": 1 + max((len(value) for value in answered), default=0)}


def _question(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and {"action", "payload", "reason"} & set(value):
        payload = value.get("payload")
        return {
            "action": str(value.get("action") or DEFAULT_ACTION)[:500],
            "payload": codec.jsonable(payload) if isinstance(payload, dict) else {"value": codec.jsonable(payload)},
            "reason": str(value.get("reason") or DEFAULT_REASON)[:10_000],
        }
    payload = codec.jsonable(value)
    return {"action": DEFAULT_ACTION, "payload": payload if isinstance(payload, dict) else {"value": payload}, "reason": DEFAULT_REASON}


def _payload_is_wrapped(value: Any) -> bool:
    """Whether the approval's payload wraps a value that was not a dict ({"value": …})."""
    if isinstance(value, dict) and {"action", "payload", "reason"} & set(value):
        return not isinstance(value.get("payload"), dict)
    return not isinstance(value, dict)


class GraphSession(SideEffects):
    """The thread's session run, as `OperationCall` needs a run: its id and its calls. Each
    operation asks the server for it anew, so a session that ended meanwhile (the sweep ended an
    idle one) is replaced by the one the server starts; a paused mission refuses."""

    def __init__(self, saver: ThreadSaver, config: RunnableConfig) -> None:
        configurable = config["configurable"]
        self.saver = saver
        self.body = {"thread_id": str(configurable["thread_id"]), "mission_id": configurable.get(MISSION_KEY)}
        self.id = int(self.saver._post("langgraph/session", self.body)["id"])

    def _call(self, method: str, path: str, body: dict[str, Any] | None, *, idempotent: bool | None = None) -> tuple[int, Any]:
        return self.saver.connection.request(method, path, body, idempotent=idempotent)


class Reviews:
    """The Questlog side of a saver: the mission, the person's decisions, the ledger."""

    def _thread(self: ThreadSaver, config: RunnableConfig, refs: list[str] | None = None) -> dict[str, Any]:
        query = {"thread_id": str(config["configurable"]["thread_id"])}
        if refs is not None:
            query["refs"] = ",".join(refs)
        return self._get("langgraph/thread", **query)

    def mission_id(self: ThreadSaver, config: RunnableConfig) -> int:
        """The Questlog mission that holds this thread (created by its first checkpoint)."""
        return int(self._thread(config)["mission_id"])

    def pending_interrupts(self: ThreadSaver, config: RunnableConfig) -> list[Any]:
        """The interrupts the thread's latest checkpoint is stopped at."""
        configurable = config["configurable"]
        latest = self.get_tuple({"configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ""}})
        if latest is None:
            return []
        found: dict[str, Any] = {}
        # LangGraph's own reading of the writes: a task that finished (its node asked, was answered
        # and went on) still has its old interrupt write, which no longer waits.
        for status in read_task_statuses(latest.pending_writes or []).values():
            for interrupt in status.pending_interrupts:
                if getattr(interrupt, "id", None):
                    found[str(interrupt.id)] = interrupt
        return list(found.values())

    def resume_command(self: ThreadSaver, config: RunnableConfig) -> Command | None:
        """The `Command` that continues the graph with the person's decisions, or None while one is
        still pending (or nothing waits). Each decision is
        {"decision": "approved"|"rejected", "payload": <the approved or edited payload>, "note": str}.
        Raises `MissionNotStartable` when a person paused or cancelled the mission."""
        interrupts = self.pending_interrupts(config)
        thread = self._thread(config, refs=[str(i.id) for i in interrupts])
        if thread["status"] in STOPPED:
            raise errors.MissionNotStartable(
                f"The mission is {thread['status']}: {thread['stop_detail'] or thread['stop_reason'] or 'a person stopped it'}.",
                status=409,
                code="mission_not_startable",
                error={"code": "mission_not_startable", "status": thread["status"], "stop_reason": thread["stop_reason"]},
            )
        if not interrupts:
            return None
        decided = {approval["agent_ref"]: approval for approval in thread["approvals"]}
        if any(str(i.id) not in decided or decided[str(i.id)]["status"] == "pending" for i in interrupts):
            return None
        answers = {str(i.id): _answer(i, decided[str(i.id)]) for i in interrupts}
        if len(answers) == 1:
            return Command(resume=next(iter(answers.values())))
        return Command(resume=answers)

    def operation(
        self: ThreadSaver,
        config: RunnableConfig,
        key: str,
        kind: str,
        target: str,
        request: dict[str, Any],
        *,
        max_attempts: int = 3,
        reconcile: Reconcile | None = None,
    ) -> OperationCall:
        """A side effect through the thread's operation ledger, as `Run.operation`
        (`saver.operation(config, "invite:team", "email.send", "team@…", body)(send)`): a node re-run
        after a crash or a resume answers the stored receipt instead of repeating the effect."""
        return GraphSession(self, config).operation(key, kind=kind, target=target, request=request, max_attempts=max_attempts, reconcile=reconcile)

    def finish(self: ThreadSaver, config: RunnableConfig, detail: str = "The graph finished.") -> models.Run:
        """Mark the thread's mission completed (a graph has no "done" signal a saver sees)."""
        session = GraphSession(self, config)
        _, answer = session._call("POST", f"runs/{session.id}/stop", {"reason": "completed", "detail": detail}, idempotent=False)
        return models.Run.from_dict(answer)


def _answer(interrupt: Any, approval: dict[str, Any]) -> dict[str, Any]:
    decision = DECISIONS.get(approval["status"], "rejected")
    payload = approval["decided_payload"] if decision == "approved" and approval["decided_payload"] is not None else approval["payload"]
    if _payload_is_wrapped(interrupt.value) and isinstance(payload, dict) and set(payload) == {"value"}:
        payload = payload["value"]
    note = approval.get("note") or ("The request expired before a person answered." if approval["status"] == "expired" else "")
    return {"decision": decision, "payload": payload, "note": note}
