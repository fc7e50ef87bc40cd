"""The LangGraph saver's reads: checkpoint tuples with their pending writes and blob contents,
filtered by metadata (`get_tuple`, `list`). Writes and threads live in `saves` and `threads`."""

import json
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform

from checkpoints.services import blobs_get
from quests.engine import reads, runner
from quests.engine.writes import Credentials
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.langgraph.services.saves import LIST_LIMIT
from quests.langgraph.services.sessions import thread_mission_id, thread_missions
from quests.services import tokens
from quests.services.audit import Actor


def graph_checkpoints(
    *,
    actor: Actor | Credentials,
    thread_id: str | None = None,
    ns: str | None = None,
    graph_id: str | None = None,
    before: str | None = None,
    metadata: dict[str, Any] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """LangGraph's checkpoint tuples, newest first: each with its channel values and pending
    writes, in three queries whatever the number (checkpoints, writes, blobs). LangGraph's
    `get_tuple` (one thread and namespace, no filter, the newest or a given id) is the engine's
    one read instead, which also authenticates an agent token's `Credentials` (PostgreSQL)."""
    if thread_id is not None and ns is not None and before is None and not metadata and limit == 1:
        return graph_tuple(actor=actor, thread_id=thread_id, ns=ns, graph_id=graph_id)
    if isinstance(actor, Credentials):
        actor = tokens.credentials_actor(actor, counted=False)
    if thread_id is not None:
        rows = GraphCheckpoint.objects.filter(mission_id=thread_mission_id(actor, thread_id))
    else:
        rows = GraphCheckpoint.objects.filter(mission__in=thread_missions(actor)).select_related("mission__graph_thread")
    if ns is not None:
        rows = rows.filter(ns=ns)
    if graph_id is not None:
        rows = rows.filter(graph_id=graph_id)
    if before is not None:
        rows = rows.filter(graph_id__lt=before)
    rows = metadata_filtered(rows, metadata or {})
    limit = max(1, min(limit or LIST_LIMIT, LIST_LIMIT))
    # Within one thread and namespace an id is unique: newest first is then a backward walk of the
    # (mission, ns, graph_id) index, whatever the thread's length. Across them, ids may repeat
    # (a copied thread), and the row's id breaks the tie.
    order = ("-graph_id",) if thread_id is not None and ns is not None else ("-graph_id", "-pk")
    found = list(rows.order_by(*order)[:limit])
    writes = writes_of(found)
    contents = blobs_get([item[1] for row in found for item in row.channels.values()])
    return [_tuple(row, writes.get(_key(row), []), contents, thread_id=thread_id) for row in found]


def graph_tuple(*, actor: Actor | Credentials, thread_id: str, ns: str, graph_id: str | None) -> list[dict[str, Any]]:
    """LangGraph's `get_tuple` as `graph_checkpoints` answers it (a list of none or one): one
    statement on PostgreSQL, authentication (and the count of an agent token's request) included."""
    if isinstance(actor, Credentials) and not runner.is_postgresql():
        actor = tokens.credentials_actor(actor, counted=False)
    if isinstance(actor, Actor) and actor.user is None:
        return []
    who, row = tokens.statement_caller(actor, lambda who, count: reads.graph_tuple(who, thread_id=thread_id, ns=ns, graph_id=graph_id, count=count))
    tokens.use_recorded(who.token_id, who.token_last_used_at)
    if row is None:
        return []
    return [
        {
            "thread_id": thread_id,
            "checkpoint_ns": row["ns"],
            "checkpoint_id": row["graph_id"],
            "parent_checkpoint_id": row["parent_graph_id"] or None,
            "checkpoint": row["skeleton"],
            "metadata": row["metadata"],
            "channel_values": row["channel_values"],
            "pending_writes": row["pending_writes"],
            "mission_id": row["mission_id"],
            "questlog_checkpoint_id": row["checkpoint_id"],
        }
    ]


# A channel LangGraph versioned without a value is stored as one of these blobs (the API's schema
# fills in `data`): it seeds nothing.
def _key(row: GraphCheckpoint | GraphWrite) -> tuple[int, str, str]:
    return row.mission_id, row.ns, row.graph_id


def writes_of(checkpoints: list[GraphCheckpoint]) -> dict[tuple[int, str, str], list[GraphWrite]]:
    """The pending writes of these checkpoints, in LangGraph's order, by (mission, ns, graph id)."""
    keys = {_key(row) for row in checkpoints}
    found: dict[tuple[int, str, str], list[GraphWrite]] = {}
    candidates = GraphWrite.objects.filter(mission_id__in={key[0] for key in keys}, graph_id__in={key[2] for key in keys}).order_by(
        "task_path", "task_id", "idx"
    )
    for write in candidates if keys else ():
        if _key(write) in keys:
            found.setdefault(_key(write), []).append(write)
    return found


def metadata_filtered(rows: QuerySet[GraphCheckpoint], metadata: dict[str, Any]) -> QuerySet[GraphCheckpoint]:
    """Checkpoints whose metadata has each key at the given value. A key transform compares JSON
    values on PostgreSQL and SQLite alike (jsonb containment exists only on PostgreSQL)."""
    condition = Q()
    for number, (key, value) in enumerate(sorted(metadata.items())):
        alias = f"metadata_{number}"
        rows = rows.alias(**{alias: KeyTransform(key, "metadata")})
        condition &= Q(**{f"{alias}__isnull": True}) if value is None else Q(**{alias: value})
    return rows.filter(condition)


def _tuple(row: GraphCheckpoint, writes: list[GraphWrite], contents: dict[str, bytes], *, thread_id: str | None) -> dict[str, Any]:
    values = {name: json.loads(contents[sha]) for name, (_, sha, _) in row.channels.items() if sha in contents}
    return {
        "thread_id": thread_id if thread_id is not None else row.mission.graph_thread.thread_id,
        "checkpoint_ns": row.ns,
        "checkpoint_id": row.graph_id,
        "parent_checkpoint_id": row.parent_graph_id or None,
        "checkpoint": row.skeleton,
        "metadata": row.metadata,
        "channel_values": values,
        "pending_writes": [{"task_id": w.task_id, "task_path": w.task_path, "idx": w.idx, "channel": w.channel, "value": w.value} for w in writes],
        "mission_id": row.mission_id,
        "questlog_checkpoint_id": row.checkpoint_id,
    }
