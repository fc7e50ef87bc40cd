"""The engine's named writes for LangGraph's saver beyond its checkpoints (which are the agent's,
`checkpoints.checkpoint_write`): a task's pending writes, one round trip on PostgreSQL."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quests.engine import runner
from quests.engine.sql import graph as graph_sql
from quests.engine.writes import Caller


@dataclass(frozen=True)
class GraphWrites:
    """A LangGraph task's writes on one checkpoint of a thread: (idx, channel, value) each."""

    thread_id: str
    ns: str
    graph_id: str
    task_id: str
    task_path: str
    writes: list[tuple[int, str, Any]]
    title: str = ""


def graph_writes_put(caller: Caller, put: GraphWrites, *, fresh_after: datetime) -> int | None:
    """Keep the writes on the caller's live thread whose session run has beaten since
    `fresh_after`: the mission's id, or None (nothing written) when there is no such thread and run."""
    # One batch may hold a special channel several times at one index: the last one counts, as in
    # LangGraph's own savers (PostgreSQL's upsert refuses to touch one row twice).
    special = list({idx: (idx, channel, value) for idx, channel, value in put.writes if idx < 0}.values())
    ordinary = [write for write in put.writes if write[0] >= 0]
    params: dict[str, Any] = {
        **caller.params(),
        "thread_id": put.thread_id,
        "ns": put.ns,
        "graph_id": put.graph_id,
        "task_id": put.task_id,
        "task_path": put.task_path,
        "title": put.title,
        "fresh_after": fresh_after,
        "now": runner.now(),
    }
    if runner.is_postgresql():
        for kind, rows in (("special", special), ("ordinary", ordinary)):
            params[f"{kind}_idx"] = [idx for idx, _, _ in rows]
            params[f"{kind}_channels"] = [channel for _, channel, _ in rows]
            params[f"{kind}_values"] = [runner.json_text(value) for _, _, value in rows]
        found = runner.fetch(graph_sql.GRAPH_WRITES_PG, params)
        return found[0][0] if found else None
    target, replace, keep, title, beat = graph_sql.GRAPH_WRITES_SQLITE
    ((found, _),) = runner.steps([(target, params)])
    if not found:
        return None
    mission_id, run_id, _ = found[0]
    at = {**params, "mission_id": mission_id, "run_id": run_id}
    runner.steps(
        [(replace, {**at, "idx": idx, "channel": channel, "value": runner.json_text(value)}) for idx, channel, value in special]
        + [(keep, {**at, "idx": idx, "channel": channel, "value": runner.json_text(value)}) for idx, channel, value in ordinary]
        + [(title, at), (beat, at)]
    )
    return mission_id
