"""Scenarios `replaycheck` knows by name: an agent, the mission it works on, and what the person
does when the mission waits for them."""

from __future__ import annotations

from questlog_client.replay.scenario import Scenario
from questlog_client.scenarios import demo

NAMES = ("demo",)


def get(name: str) -> Scenario:
    if name == "demo":
        return Scenario(name="demo", agent="questlog_client.scenarios.demo:demo_agent", mission=demo.MISSION, person=demo.demo_person)
    raise KeyError(f"No scenario named {name!r}; known: {', '.join(NAMES)}")
