"""The Questlog client for agents, on httpx: `Questlog` is the front door. The parts live by
concern: the HTTP core and its retries in `core`, missions in `missions`, runs and their heartbeat
in `runs`, the operation ledger's safe path for side effects in `operations`."""

from __future__ import annotations

from functools import cached_property

from questlog_client import models
from questlog_client.core import Connection, new_key
from questlog_client.missions import Mission, Missions
from questlog_client.operations import OperationCall
from questlog_client.runs import Run

__all__ = ["Questlog", "Missions", "Mission", "Run", "OperationCall", "new_key"]


class Questlog(Connection):
    """`Questlog(base_url, token, *, timeout, retries, backoff, heartbeat_interval,
    takeover_timeout, poll_interval, transport)`: an agent's connection to a Questlog server.

    `heartbeat_interval` is how often an active run beats (keep it well under the server's
    QUESTLOG_HEARTBEAT_TIMEOUT). `takeover_timeout` is how long `start_run` keeps trying while an
    earlier run of the mission still looks alive — after a crash, that run's heartbeat must lapse
    before a new run may take over; 0 raises `RunActive` at once. `poll_interval` is how often
    `wait_for_person` looks again. `retries` and `backoff` (seconds, doubled each time) apply to
    idempotent calls only (see `questlog_client.core`). `transport` replaces httpx's: a test may
    fail calls on purpose, and `replaycheck` watches an agent's steps through one.
    """

    @cached_property
    def missions(self) -> Missions:
        return Missions(self)

    def __enter__(self) -> Questlog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def memory(self) -> list[models.MemoryItem]:
        """The user's approved long-term memory."""
        _, data = self.request("GET", "memory")
        return [models.MemoryItem.from_dict(item) for item in data["items"]]

    def checkpoint(self, checkpoint_id: int) -> models.Checkpoint:
        """One checkpoint with its `agent_state` and full `state` document."""
        _, data = self.request("GET", f"checkpoints/{checkpoint_id}")
        return models.Checkpoint.from_dict(data)
