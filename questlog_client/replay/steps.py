"""How replaycheck watches an agent without the client knowing: `StepWatch` is the httpx transport
under the agent's `Questlog`. It reports each step — a state-changing call the server accepted,
or a side effect an operation ran — and each resume bundle the agent was given.

A side effect makes no call of its own: it happens between an operation's `attempt` and its
`complete`. So the step is reported when the `complete` of an operation this process attempted is
about to leave, before the server hears of it — exactly where a crash leaves the effect done and
its receipt unrecorded. A `complete` after reconciling (no attempt in this process) ran no effect.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from questlog_client.core import is_generated_key
from questlog_client.models import Bundle

API_PREFIX = "/api/v1/"
# Calls that change nothing an agent would repeat after a crash: not steps.
NOT_STEPS = frozenset({"runs/{id}/heartbeat"})


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
BundleHook = Callable[[Bundle, float, float], None]
Labeller = Callable[[dict[str, Any], dict[str, Any]], str]


def _chosen_key(sent: dict[str, Any]) -> str:
    """The caller's own key, which is the same in every execution; a generated one is not."""
    key = sent.get("key")
    return f" {key}" if key and not is_generated_key(key) else ""


def _operation(action: str) -> Labeller:
    return lambda sent, answer: f"operation {answer.get('key') or sent.get('key')}: {action}"


def _graph_ns(sent: dict[str, Any]) -> str:
    """A LangGraph namespace without its task ids ("outer:<task id>|inner:<task id>" → "outer|inner"):
    task ids derive from checkpoint ids, which are new in every execution."""
    ns = str(sent.get("checkpoint_ns") or "")
    return f" {'|'.join(part.split(':', 1)[0] for part in ns.split('|'))}" if ns else ""


def _graph_checkpoint(sent: dict[str, Any], answer: dict[str, Any]) -> str:
    metadata = sent.get("metadata") or {}
    return f"langgraph checkpoint{_graph_ns(sent)} {metadata.get('source', '?')} {metadata.get('step', '?')}"


def _graph_writes(sent: dict[str, Any], answer: dict[str, Any]) -> str:
    # A node's task path ends with its name ("~__pregel_pull, plan"); the writes of a Command
    # (a resume, an update) belong to no task and have no path.
    node = str(sent.get("task_path") or "").rsplit(", ", 1)[-1].strip() or "(command)"
    channels = list(dict.fromkeys(str(w.get("channel")) for w in sent.get("writes") or []))
    asked = f" (asks {len(sent['interrupts'])} approval{'s' if len(sent['interrupts']) != 1 else ''})" if sent.get("interrupts") else ""
    return f"langgraph writes{_graph_ns(sent)} {node}: {', '.join(channels) or 'nothing'}{asked}"


# Labels name a step the same way in every execution of a scenario (no ids, no generated keys):
# that is how the steps before a crash are checked against the uninterrupted run's.
LABELS: dict[str, Labeller] = {
    "missions": lambda sent, answer: "create mission",
    "missions/{id}/constraints": lambda sent, answer: "add constraint",
    "missions/{id}/runs": lambda sent, answer: "start run",
    "runs/{id}/records": lambda sent, answer: f"record {sent.get('kind')}{_chosen_key(sent)}",
    "runs/{id}/checkpoints": lambda sent, answer: f"checkpoint{_chosen_key(sent)}",
    "runs/{id}/milestones": lambda sent, answer: f"milestone {sent.get('kind')}" + (" (gate)" if sent.get("gate") else ""),
    "runs/{id}/approvals": lambda sent, answer: "approval request",
    "runs/{id}/memory-proposals": lambda sent, answer: "memory proposal",
    "runs/{id}/stop": lambda sent, answer: f"stop {sent.get('reason')}",
    "runs/{id}/operations": lambda sent, answer: f"operation {sent.get('key')}: plan",
    "operations/{id}/attempt": _operation("attempt"),
    "operations/{id}/complete": _operation("complete"),
    "operations/{id}/fail": _operation("fail"),
    "operations/{id}/observe": _operation("observe"),
    "langgraph/checkpoints": _graph_checkpoint,
    "langgraph/writes": _graph_writes,
    "langgraph/session": lambda sent, answer: "langgraph session",
    "langgraph/threads/delete": lambda sent, answer: "langgraph delete thread",
    "langgraph/delete-for-runs": lambda sent, answer: "langgraph delete runs' checkpoints",
    "langgraph/copy": lambda sent, answer: "langgraph copy thread",
    "langgraph/prune": lambda sent, answer: f"langgraph prune {sent.get('strategy') or 'keep_latest'}",
}


def shape_of(path: str) -> str:
    return re.sub(r"(?<=/)\d+(?=/|$)", "{id}", path)


def is_step(method: str, shape: str) -> bool:
    """Whether a successful call is a step: not a read, not a heartbeat."""
    return method not in ("GET", "HEAD", "OPTIONS") and shape not in NOT_STEPS


def step_label(method: str, path: str, sent: dict[str, Any] | None, answer: dict[str, Any] | None) -> str | None:
    """The step a successful call is, or None when it is no step."""
    shape = shape_of(path)
    if not is_step(method, shape):
        return None
    labeller = LABELS.get(shape)
    return labeller(sent or {}, answer or {}) if labeller else f"{method} {shape}"


def _as_dict(content: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(content) if content else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class StepWatch(httpx.BaseTransport):
    """`Questlog(url, token, transport=StepWatch(on_step, on_bundle))`: hears every step and every
    bundle of that client; `on_bundle(bundle, asked_at, got_at)` with wall-clock times."""

    def __init__(self, on_step: StepHook, on_bundle: BundleHook, inner: httpx.BaseTransport | None = None) -> None:
        self.on_step = on_step
        self.on_bundle = on_bundle
        self.inner = inner or httpx.HTTPTransport(retries=1)
        self._lock = threading.Lock()
        self._count = 0
        self._attempted: dict[str, str] = {}  # operation path → key, attempted by this process

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix(API_PREFIX)
        sent = _as_dict(request.content)
        self._before(request.method, path)
        asked_at = time.time()
        response = self.inner.handle_request(request)
        if response.status_code >= 400:
            return response
        shape = shape_of(path)
        stepped = is_step(request.method, shape)
        if not stepped and shape != "missions/{id}/resume":
            return response
        answer = _as_dict(response.read())  # httpx keeps the content read here for the client
        if stepped:
            self._after_step(request.method, path, sent, answer, response.status_code)
        if shape == "missions/{id}/resume" and answer is not None:
            self.on_bundle(Bundle.from_dict(answer), asked_at, time.time())
        elif shape == "missions/{id}/runs" and answer is not None:
            self.on_bundle(Bundle.from_dict(answer["resume"]), asked_at, time.time())
        return response

    def close(self) -> None:
        self.inner.close()

    def _before(self, method: str, path: str) -> None:
        if method != "POST" or not path.endswith(("/complete", "/fail")):
            return
        operation = path.rsplit("/", 1)[0]
        with self._lock:
            key = self._attempted.pop(operation, None)
        if key is not None and path.endswith("/complete"):
            self._emit(f"operation {key}: side effect", "EFFECT", operation, 0, None, None)

    def _after_step(self, method: str, path: str, sent: dict[str, Any] | None, answer: dict[str, Any] | None, status: int) -> None:
        label = step_label(method, path, sent, answer) or ""
        if shape_of(path) == "operations/{id}/attempt" and answer is not None:
            with self._lock:
                self._attempted[path.rsplit("/", 1)[0]] = str(answer.get("key"))
        self._emit(label, method, path, status, answer, sent)

    def _emit(self, label: str, method: str, path: str, status: int, answer: dict[str, Any] | None, sent: dict[str, Any] | None) -> None:
        with self._lock:
            self._count += 1
            step = Step(self._count, label, method, path, status, answer, sent)
        self.on_step(step)
