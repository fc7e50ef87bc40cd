"""What replaycheck observed in one execution of a scenario, for `compare`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Execution:
    """A scenario run once (`point` None) or crashed after step `point` and resumed."""

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
