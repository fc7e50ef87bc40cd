"""What replaycheck replays: the agent, the mission it works on, and what the person does."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from questlog_client.client import Questlog
from questlog_client.fake_service import FakeService
from questlog_client.models import Bundle
from questlog_client.people import PersonSession

AgentFn = Callable[[Questlog, int, FakeService], Any]
PersonFn = Callable[[PersonSession, Bundle], None]


def strip_ids(value: Any) -> Any:
    """Drop `id`, `*_id` and `*_ids` keys recursively: ids differ between missions by nature."""
    if isinstance(value, dict):
        return {k: strip_ids(v) for k, v in value.items() if not (k == "id" or k.endswith("_id") or k.endswith("_ids"))}
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value


def approve_everything(person: PersonSession, bundle: Bundle) -> None:
    """The default person: approves every gate milestone and every approval waiting for them."""
    for milestone in bundle.milestones:
        if milestone.gate and milestone.review_status == "pending_review":
            person.review_milestone(milestone.id, "approve")
    for approval in bundle.approvals:
        if approval.status == "pending":
            person.decide_approval(approval.id, "approve")


@dataclass
class Scenario:
    """What to replay: the agent (a module-level function or "module:function"), the body of the
    mission it works on (POST /missions), and what the person does when the mission waits."""

    name: str
    agent: str | AgentFn
    mission: dict[str, Any]
    person: PersonFn = approve_everything
    normalize: Callable[[Any], Any] = strip_ids

    @property
    def import_root(self) -> str | None:
        """The folder the agent's module is imported from, for the agent processes' path."""
        if isinstance(self.agent, str):
            return None
        module = sys.modules.get(getattr(self.agent, "__module__", ""))
        file: str | None = getattr(module, "__file__", None) if module is not None else None
        if module is None or not file:
            return None
        depth = module.__name__.count(".") + (Path(file).name == "__init__.py")
        return str(Path(file).resolve().parents[depth])

    @property
    def agent_path(self) -> str:
        if isinstance(self.agent, str):
            return self.agent
        module = getattr(self.agent, "__module__", None)
        if not module or module == "__main__" or "<locals>" in self.agent.__qualname__:
            raise ValueError("The agent must be a module-level function of an importable module (it runs in a subprocess).")
        return f"{module}:{self.agent.__qualname__}"
