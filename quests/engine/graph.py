"""The engine's named operations for LangGraph's saver: the read of a put's fast path (its write is
the agent's, `checkpoints.checkpoint_write`, with the LangGraph row in the same statement; a put
that follows this process's last save of the thread needs no read: `GraphKnown`), and a task's
pending writes; one round trip each on PostgreSQL."""

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from quests.engine import runner
from quests.engine.checkpoints import Claim, Known, Seen, as_who, known_keep, known_take
from quests.engine.sql import graph as graph_sql
from quests.engine.writes import LOCKED_WIDTH, Caller, Count, Credentials, Locked, locked_from_row


@dataclass(frozen=True)
class GraphRow:
    """A LangGraph checkpoint's row (`GraphCheckpoint`) as the saver's put writes it."""

    ns: str
    graph_id: str
    parent_graph_id: str
    skeleton: dict[str, Any]
    metadata: dict[str, Any]
    channels: dict[str, list[Any]]  # {channel: [version, blob sha256, size]}
    run_ref: str


@dataclass(frozen=True)
class GraphSeen:
    """What `graph_put_read` read: the session run and its mission as a run's lock reads them (no
    lock held), whether the checkpoint is saved already, the parent's channel map, and the claim
    (with the LangGraph row's id) for the write."""

    locked: Locked
    known: bool
    parent_channels: dict[str, list[Any]] | None
    claim: Claim
    graph_row_id: int


def graph_put_read(
    who: Caller | Credentials, *, thread_id: str, ns: str, graph_id: str, parent_graph_id: str, count: Count | None = None
) -> tuple[Seen, GraphSeen | None] | None:
    """Round trip 1 of the saver's put (PostgreSQL, autocommit): who called (None when the token
    is not valid) and what the put's fast path needs (None when the caller has no such live
    thread, or its mission no active run). With `count` it also counts the request of a valid
    token (`count.value`)."""
    params = {"thread_id": thread_id, "ns": ns, "graph_id": graph_id, "parent_graph_id": parent_graph_id}
    read = as_who(who, graph_sql.GRAPH_PUT_READ_PG, graph_sql.GRAPH_PUT_READ_COUNTED_PG, params, count)
    if read is None:
        return None
    seen, row = read
    if row[0] is None:
        return seen, None
    mission_seen, checkpoint_id, graph_row_id, known, parent_channels = row[LOCKED_WIDTH:]
    return seen, GraphSeen(
        locked=locked_from_row(row),
        known=known,
        parent_channels=runner.json_value(parent_channels),
        claim=Claim(mission_seen=mission_seen, checkpoint_id=checkpoint_id),
        graph_row_id=graph_row_id,
    )


def graph_claim(seen: GraphSeen, row: GraphRow) -> Claim:
    """The claim of the put's write: the checkpoint and `row` in one statement, or nothing."""
    also = {**_row_params(row), "graph_row_id": seen.graph_row_id}
    return replace(seen.claim, also=(graph_sql.GRAPH_PUT_CLAIMED_WRITE_PG, also))


def _row_params(row: GraphRow) -> dict[str, Any]:
    return {
        "ns": row.ns,
        "graph_id": row.graph_id,
        "parent_graph_id": row.parent_graph_id,
        "skeleton": runner.json_text(row.skeleton),
        "metadata": runner.json_text(row.metadata),
        "graph_channels": runner.json_text(row.channels),
        "run_ref": row.run_ref,
    }


# --- The put in one round trip ---------------------------------------------------------------------


@dataclass
class GraphKnown(Known):
    """A thread's mission as this process's last save of the thread left it (`Known`), with that
    save's LangGraph id and channel map: LangGraph's loop saves each checkpoint as the child of the
    one before, whose map gives the blobs of the channels a save does not send."""

    graph_id: str
    channels: dict[str, list[Any]]


def graph_known_take(who: Caller | Credentials, thread_id: str, ns: str) -> GraphKnown | None:
    """The thread's last save by this process for this caller, taken out (`known_take`)."""
    known = known_take(who, ("graph", thread_id, ns))
    return known if isinstance(known, GraphKnown) else None


def graph_known_keep(who: Caller | Credentials, thread_id: str, ns: str, known: GraphKnown) -> None:
    known_keep(who, ("graph", thread_id, ns), known)


def graph_known_claim(known: GraphKnown, row: GraphRow, *, who: Caller | Credentials, count: Count | None, rate: int, used_token_id: int | None) -> Claim:
    """The claim of the put in one statement (`GRAPH_PUT_KNOWN_WRITE_PG`): the checkpoint and `row`
    (its id allocated by the statement, which answers it) if the mission row is still as the last
    save left it, or nothing."""
    return Claim(
        mission_seen=known.mission_after,
        checkpoint_id=None,
        used_token_id=used_token_id,
        also=(graph_sql.GRAPH_PUT_KNOWN_WRITE_PG, _row_params(row)),
        also_counted=graph_sql.GRAPH_PUT_KNOWN_WRITE_COUNTED_PG,
        who=who,
        count=count,
        rate=rate,
    )


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


def graph_writes_put(who: Caller | Credentials, put: GraphWrites, *, fresh_after: datetime, count: Count | None = None) -> tuple[Seen, int | None] | None:
    """Keep the writes on the caller's live thread whose session run has beaten since
    `fresh_after`: who called and the mission's id, or None for it (nothing written) when there is
    no such thread and run. None when the token is not valid. An agent token's `Credentials`
    (PostgreSQL) are authenticated by the same statement, which with `count` also counts the
    request (`count.value`); SQLite takes a `Caller` (authenticated before)."""
    # One batch may hold a special channel several times at one index: the last one counts, as in
    # LangGraph's own savers (PostgreSQL's upsert refuses to touch one row twice).
    special = list({idx: (idx, channel, value) for idx, channel, value in put.writes if idx < 0}.values())
    ordinary = [write for write in put.writes if write[0] >= 0]
    params: dict[str, Any] = {
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
        read = as_who(who, graph_sql.GRAPH_WRITES_PG, graph_sql.GRAPH_WRITES_COUNTED_PG, params, count)
        if read is None:
            return None
        seen, (written,) = read
        return seen, written
    if not isinstance(who, Caller):
        raise ValueError("SQLite keeps a task's writes for a caller authenticated before.")
    params.update(who.params())
    caller = Seen.known(who)
    target, replace, keep, title, beat = graph_sql.GRAPH_WRITES_SQLITE
    ((found, _),) = runner.steps([(target, params)])
    if not found:
        return caller, None
    mission_id, run_id, _ = found[0]
    at = {**params, "mission_id": mission_id, "run_id": run_id}
    runner.steps(
        [(replace, {**at, "idx": idx, "channel": channel, "value": runner.json_text(value)}) for idx, channel, value in special]
        + [(keep, {**at, "idx": idx, "channel": channel, "value": runner.json_text(value)}) for idx, channel, value in ordinary]
        + [(title, at), (beat, at)]
    )
    return caller, mission_id
