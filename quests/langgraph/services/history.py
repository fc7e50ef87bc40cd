"""A LangGraph delta channel's history: one walk up a thread's parent chain, a window of ancestors
per query, instead of one request per ancestor (the saver's `get_delta_channel_history`)."""

import json
from typing import Any

from django.db.models import QuerySet

from checkpoints.services import blobs_get
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.langgraph.services.channels import encoded
from quests.langgraph.services.sessions import thread_mission_id
from quests.services.audit import Actor

EMPTY_SHAS = frozenset({encoded({"type": "empty"})[0], encoded({"type": "empty", "data": None})[0]})
# How many of a namespace's checkpoints one query reads while walking a parent chain.
ANCESTORS_WINDOW = 100


def graph_delta_history(*, actor: Actor, thread_id: str, ns: str, graph_id: str | None, channels: list[str]) -> dict[str, dict[str, Any]]:
    """What LangGraph's `get_delta_channel_history` asks, in a few queries instead of a request
    per ancestor: walking the parent chain of the checkpoint (the newest without `graph_id`), each
    channel's writes stored on its ancestors, oldest first, back to the nearest ancestor that holds
    a value for it, which is its `seed` (that ancestor's own writes count: they made its child).
    A channel that no ancestor holds has no seed."""
    rows = GraphCheckpoint.objects.filter(mission_id=thread_mission_id(actor, thread_id), ns=ns).order_by("-graph_id")
    target = (rows.filter(graph_id=graph_id) if graph_id is not None else rows).values_list("mission_id", "parent_graph_id").first()
    found: dict[str, dict[str, Any]] = {name: {"writes": []} for name in channels}
    if target is None:
        return found
    mission_id, cursor = target
    chain, seeds = _ancestors(rows, cursor, set(channels))
    writes: dict[str, list[GraphWrite]] = {}
    for write in GraphWrite.objects.filter(mission_id=mission_id, ns=ns, graph_id__in=[graph for graph, _ in chain], channel__in=channels):
        writes.setdefault(write.graph_id, []).append(write)
    # Oldest first; within a checkpoint in LangGraph's order, compared as Python compares text.
    for graph, wanted in reversed(chain):
        for write in sorted(writes.get(graph, []), key=lambda w: (w.task_path, w.task_id, w.idx)):
            if write.channel in wanted:
                found[write.channel]["writes"].append({"task_id": write.task_id, "channel": write.channel, "value": write.value})
    contents = blobs_get(list(seeds.values()))
    for name, sha in seeds.items():
        if sha in contents:
            found[name]["seed"] = json.loads(contents[sha])
    return found


def _ancestors(rows: QuerySet[GraphCheckpoint], cursor: str, remaining: set[str]) -> tuple[list[tuple[str, set[str]]], dict[str, str]]:
    """The ancestors from `cursor` up, each with the channels still walked there, until every
    channel found its seed (the blob it had there) or the chain ends. Ids grow with time, so one
    query reads the next window of older checkpoints, where the parents are."""
    window: dict[str, tuple[str, dict[str, Any]]] = {}
    chain: list[tuple[str, set[str]]] = []
    seeds: dict[str, str] = {}
    walked: set[str] = set()
    # A client may name any id as a parent, its own included: a chain that comes back on itself ends.
    while cursor and remaining and cursor not in walked:
        walked.add(cursor)
        if cursor not in window:
            older = rows.filter(graph_id__lte=cursor).values_list("graph_id", "parent_graph_id", "channels")[:ANCESTORS_WINDOW]
            window.update((graph, (parent, held)) for graph, parent, held in older)
            if cursor not in window:
                break
        parent, held = window[cursor]
        chain.append((cursor, set(remaining)))
        for name in list(remaining):
            if name in held and held[name][1] not in EMPTY_SHAS:
                seeds[name] = held[name][1]
                remaining.discard(name)
        cursor = parent
    return chain, seeds
