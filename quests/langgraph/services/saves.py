"""LangGraph threads kept as Questlog missions (`questlog_client.langgraph.QuestlogSaver`).

A thread of one user is one mission, created on first use, or an existing quest the thread joins
on the terms of starting a run there. Every LangGraph checkpoint is a Questlog
checkpoint of that mission (so the mission page, restore, compaction and retention apply), written
by the mission's *session run*: LangGraph has no runs of its own to fence with, so the first write of
a session starts a run (agent `langgraph`) and every write keeps it alive. A mission a person paused
or cancelled refuses the graph's writes (`mission_not_startable`), and an `interrupt()` becomes an
approval that the next run of the graph waits for. Channel values arrive already encoded by the
client ({"type", "data"}) and are stored as content-addressed blobs, one per channel and version:
a checkpoint sends only the channels in LangGraph's `new_versions` and refers to the others."""

from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from checkpoints.models import Checkpoint
from quests.engine import graph as engine_graph, runner, writes as engine_writes
from quests.engine.checkpoints import Seen
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.langgraph.services.channels import channels_known, channels_resolved
from quests.langgraph.services.sessions import WRITES_WHILE_WAITING, ThreadDeleted, lock_thread, session_run, titled
from quests.models import Mission, Run
from quests.services import approvals, checkpointing, savestate, tokens
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.errors import InvalidInput, NotFound

LIST_LIMIT = 100
# A LangGraph checkpoint has no idempotency key: a retried save answers the saved one (its id).
NO_KEY = engine_writes.Key("checkpoints", None)


def _beat(run: Run | None) -> None:
    if run is not None:
        run.heartbeat_at = timezone.now()
        Run.objects.filter(pk=run.pk).update(heartbeat_at=run.heartbeat_at)


# --- Checkpoints --------------------------------------------------------------------------------


def graph_put(
    *,
    actor: Actor | engine_writes.Credentials,
    thread_id: str,
    ns: str,
    graph_id: str,
    parent_graph_id: str | None,
    skeleton: dict[str, Any],
    metadata: dict[str, Any],
    channels: dict[str, dict[str, Any]],
    title: str = "",
    mission_id: int | None = None,
) -> GraphCheckpoint:
    """Save one LangGraph checkpoint. `channels` holds only the channels LangGraph says changed
    ({name: {"version", "value"}}); every other channel of `skeleton["channel_versions"]` refers to
    the blob an earlier checkpoint of the namespace stored for that version. Saving an id that is
    already saved answers the saved one (a retried request). An agent token's `Credentials` are
    authenticated (and its request counted) by the fast path's first statement."""
    versions = skeleton.get("channel_versions") or {}
    if not isinstance(versions, dict):
        raise InvalidInput("checkpoint.channel_versions must be an object.", field="checkpoint.channel_versions")
    row = engine_graph.GraphRow(
        ns=ns,
        graph_id=graph_id,
        parent_graph_id=parent_graph_id or "",
        skeleton=skeleton,
        metadata=metadata,
        channels={},
        run_ref=str(metadata.get("run_id") or "")[:100],
    )
    note = f"LangGraph {metadata.get('source', 'checkpoint')} step {metadata.get('step', '?')}"[:200]
    # A save that brings the graph's input (its title) takes the locked path, which titles the
    # mission if a task's writes made its thread first.
    if runner.is_postgresql() and not title and (isinstance(actor, engine_writes.Credentials) or actor.user is not None):
        saved, actor = _put_unlocked(actor, thread_id, row, versions, channels, note)
        if saved is not None:
            return saved
    elif isinstance(actor, engine_writes.Credentials):
        actor = tokens.credentials_actor(actor, counted=False)
    with transaction.atomic():
        mission = lock_thread(actor, thread_id, title=title, mission_id=mission_id)
        titled(mission, thread_id, title)
        known = {
            found.graph_id: found for found in GraphCheckpoint.objects.filter(mission=mission, ns=ns, graph_id__in=[graph_id, parent_graph_id or graph_id])
        }
        if graph_id in known:
            return known[graph_id]
        run = session_run(actor, mission)
        parent = known.get(parent_graph_id or "")
        resolved, contents = channels_resolved(mission, ns, versions, channels, parent_channels=parent.channels if parent else None)
        savestate.ensure_current(mission)
        refs = {name: sha for name, (_, sha, _) in resolved.items()}
        size = sum(item[2] for item in resolved.values())
        stored = set(refs.values()) - set(contents)
        checkpoint = checkpointing.take_checkpoint(
            mission, trigger="agent", run=run, agent_parts=(refs, contents, size), guarded=True, stored=stored, beat=True, note=note
        )
        saved = GraphCheckpoint(checkpoint=checkpoint, mission=mission, **{**vars(row), "channels": {name: list(item) for name, item in resolved.items()}})
        saved.save(force_insert=True)
        saved.checkpoint = checkpoint
        return saved


def _put_unlocked(
    actor: Actor | engine_writes.Credentials,
    thread_id: str,
    row: engine_graph.GraphRow,
    versions: dict[str, Any],
    channels: dict[str, dict[str, Any]],
    note: str,
) -> tuple[GraphCheckpoint | None, Actor]:
    """The save in autocommit statements, as the agent's checkpoint is made (PostgreSQL): in one
    when it is the child of this process's last save of the thread (`_put_known`); else who calls,
    the live thread's mission and session run read without a lock, then the checkpoint and its row
    written only if the mission row is still as read. Without the save (None), nothing is written
    and the locked path saves it, for the actor returned: a first save or a deleted thread, a save
    already made, a session run to start, a channel its parent does not hold, or a mission that
    moved after the read."""
    credentials = actor if isinstance(actor, engine_writes.Credentials) else None
    caller = tokens.who_calls(actor)
    known = engine_graph.graph_known_take(caller, thread_id, row.ns)
    counted = False
    if known is not None and known.graph_id == row.parent_graph_id and not known.locked.run.is_stale():
        saved, counted = _put_known(caller, thread_id, known, row, versions, channels, note)
        if saved is not None:
            return saved, cast(Actor, actor)
    who, seen = tokens.statement_caller(
        actor,
        lambda who, count: engine_graph.graph_put_read(
            who, thread_id=thread_id, ns=row.ns, graph_id=row.graph_id, parent_graph_id=row.parent_graph_id, count=count
        ),
        counted=counted,
    )
    use_due = tokens.use_to_note(who)

    def locked_path() -> tuple[None, Actor]:
        # Authenticated again in full for the locked path (its token's use recorded then); the
        # request was counted by the read.
        return None, (tokens.credentials_actor(credentials, counted=True) if credentials else cast(Actor, actor))

    if seen is None or seen.known or seen.locked.run.is_stale():
        return locked_path()
    resolved, contents, missing = channels_known(versions, channels, seen.parent_channels)
    if missing:
        return locked_path()
    row, agent_parts = _with_channels(row, resolved, contents)
    claim = replace(engine_graph.graph_claim(seen, row), used_token_id=use_due)
    who.locked = seen.locked
    checkpoint = checkpointing.take_agent_checkpoint(seen.locked, agent_parts=agent_parts, note=note, key=NO_KEY, claim=claim)
    if checkpoint is None:
        return locked_path()
    _known_after(caller, thread_id, who, row, checkpoint, agent_parts, use_due)
    return _saved(row, checkpoint, seen.graph_row_id), cast(Actor, actor)


def _put_known(
    caller: engine_writes.Caller | engine_writes.Credentials,
    thread_id: str,
    known: engine_graph.GraphKnown,
    row: engine_graph.GraphRow,
    versions: dict[str, Any],
    channels: dict[str, dict[str, Any]],
    note: str,
) -> tuple[GraphCheckpoint | None, bool]:
    """The save in one statement, on the mission row as this process's last save of the thread
    left it (the save is that one's child): (the save, or None when the row moved, the thread was
    deleted, the id is saved already or the caller may no longer write there, and nothing was
    written; whether the request was counted)."""
    resolved, contents, missing = channels_known(versions, channels, known.channels)
    if missing:
        return None, False
    row, agent_parts = _with_channels(row, resolved, contents)
    seen = known.seen
    use_due = tokens.use_to_note(seen)

    def write(count: engine_writes.Count | None, rate: int) -> Checkpoint | None:
        claim = engine_graph.graph_known_claim(known, row, who=caller, count=count, rate=rate, used_token_id=use_due)
        return checkpointing.take_agent_checkpoint(known.locked, agent_parts=agent_parts, note=note, key=NO_KEY, claim=claim)

    checkpoint, counted = tokens.counted_with(caller, write)
    if checkpoint is None:
        return None, counted
    _known_after(caller, thread_id, seen, row, checkpoint, agent_parts, use_due)
    (graph_row_id,) = checkpoint.also_answered
    return _saved(row, checkpoint, graph_row_id), counted


def _with_channels(
    row: engine_graph.GraphRow, resolved: dict[str, tuple[str, str, int]], contents: dict[str, bytes]
) -> tuple[engine_graph.GraphRow, checkpointing.AgentParts]:
    """The LangGraph row with its channel map, and the agent-state parts of its checkpoint."""
    refs = {name: sha for name, (_, sha, _) in resolved.items()}
    return replace(row, channels={name: list(item) for name, item in resolved.items()}), (refs, contents, sum(item[2] for item in resolved.values()))


def _known_after(
    caller: engine_writes.Caller | engine_writes.Credentials,
    thread_id: str,
    seen: Seen,
    row: engine_graph.GraphRow,
    checkpoint: Checkpoint,
    agent_parts: checkpointing.AgentParts,
    used: int | None,
) -> None:
    """Keep the thread's mission as this save left it, for its child's one statement."""
    known = checkpointing.known_after(seen, checkpoint, agent_parts[0], used)
    if known is not None:
        graph_known = engine_graph.GraphKnown(seen=known.seen, mission_after=known.mission_after, graph_id=row.graph_id, channels=row.channels)
        engine_graph.graph_known_keep(caller, thread_id, row.ns, graph_known)


def _saved(row: engine_graph.GraphRow, checkpoint: Checkpoint, graph_row_id: int) -> GraphCheckpoint:
    saved = GraphCheckpoint(id=graph_row_id, checkpoint=checkpoint, mission_id=checkpoint.mission_id, created_at=checkpoint.created_at, **vars(row))
    saved._state.adding, saved._state.db = False, DEFAULT_DB_ALIAS
    return saved


def graph_put_writes(
    *,
    actor: Actor | engine_writes.Credentials,
    thread_id: str,
    ns: str,
    graph_id: str,
    task_id: str,
    task_path: str,
    writes: list[dict[str, Any]],
    interrupts: list[dict[str, Any]] | None = None,
    title: str = "",
    mission_id: int | None = None,
) -> list[Any]:
    """Keep a task's writes on a checkpoint (which may not have arrived yet: LangGraph saves
    checkpoints in the background). Ordinary writes are idempotent per task and index
    (a retried task keeps its first writes); special channels (negative indexes: an error, an
    interrupt) are replaced, the last one of a batch winning. `interrupts` become approvals (once
    per interrupt id), and the session run ends waiting for them. `title` titles a mission still named after its thread.

    The usual call (a live thread whose session run is going, no interrupt) is one statement of
    the engine, which on PostgreSQL also authenticates an agent token's `Credentials` (and counts
    its request); the first write of a thread, a run to start or interrupts take the general path."""
    if isinstance(actor, engine_writes.Credentials) and (interrupts or not runner.is_postgresql()):
        actor = tokens.credentials_actor(actor, counted=False)
    credentials = actor if isinstance(actor, engine_writes.Credentials) else None
    if not interrupts and (credentials is not None or cast(Actor, actor).user is not None):
        put = engine_graph.GraphWrites(
            thread_id=thread_id,
            ns=ns,
            graph_id=graph_id,
            task_id=task_id,
            task_path=task_path,
            writes=[(item["idx"], item["channel"], item["value"]) for item in writes],
            title=title,
        )
        fresh_after = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT)
        with transaction.atomic():
            who, written = tokens.statement_caller(actor, lambda who, count: engine_graph.graph_writes_put(who, put, fresh_after=fresh_after, count=count))
        if written is not None:
            tokens.use_recorded(who.token_id, who.token_last_used_at)
            return []
        if credentials is not None:
            # Authenticated again in full for the general path (its token's use recorded then).
            actor = tokens.credentials_actor(credentials, counted=True)
    actor = cast(Actor, actor)
    with transaction.atomic():
        mission = lock_thread(actor, thread_id, title=title, mission_id=mission_id)
        run = session_run(actor, mission)
        rows = [
            GraphWrite(
                mission=mission,
                ns=ns,
                graph_id=graph_id,
                task_id=task_id,
                task_path=task_path,
                idx=item["idx"],
                channel=item["channel"],
                value=item["value"],
            )
            for item in writes
        ]
        # One batch may hold a special channel several times at one index (a node that called
        # interrupt() three times sends three `__resume__` writes at -4): the last one counts, as
        # in LangGraph's own savers, and PostgreSQL's upsert refuses to touch one row twice.
        special = list({row.idx: row for row in rows if row.idx < 0}.values())
        ordinary = [row for row in rows if row.idx >= 0]
        if special:
            GraphWrite.objects.bulk_create(
                special,
                update_conflicts=True,
                unique_fields=["mission", "ns", "graph_id", "task_id", "idx"],
                update_fields=["channel", "value", "task_path"],
            )
        if ordinary:
            GraphWrite.objects.bulk_create(ordinary, ignore_conflicts=True)
        titled(mission, thread_id, title)
        made = _interrupted(actor, mission, run, interrupts or [])
        if run is not None and not made:
            _beat(run)
        return made


def _interrupted(actor: Actor, mission: Mission, run: Run | None, interrupts: list[dict[str, Any]]) -> list[Any]:
    asked = set(mission.approvals.filter(agent_ref__in=[item["id"] for item in interrupts]).values_list("agent_ref", flat=True))
    items = [
        {
            "action": item["action"],
            "payload": item["payload"],
            "reason": item["reason"],
            "agent_ref": item["id"],
            "node": item.get("node") or "",
            "question": item.get("question"),
        }
        for item in interrupts
        if item["id"] not in asked
    ]
    if not items:
        return []
    if run is None and mission.status in WRITES_WHILE_WAITING:
        return approvals.approvals_add_while_waiting(actor=actor, mission=mission, items=items)
    if run is None:
        run = session_run(actor, mission, saving=False)
    made, _ = approvals.approvals_request(actor=actor, run_id=run.pk, items=items)
    return made


def graph_thread(actor: Actor, thread_id: str, *, refs: list[str] | None = None) -> dict[str, Any]:
    """What a resumed graph needs to know: its mission's status and why it stopped, and the
    approvals its interrupts became (those named by `refs`, or all), with the person's decisions."""
    mission = visible(actor, Mission).select_related("graph_thread").filter(graph_thread__thread_id=thread_id).first()
    if mission is None:
        raise NotFound(f"No thread {thread_id!r}.")
    if mission.graph_thread.deleted_at is not None:
        raise ThreadDeleted(f"Thread {thread_id!r} was deleted.", thread_id=thread_id)
    asked = mission.approvals.exclude(agent_ref="").order_by("pk")
    if refs is not None:
        asked = asked.filter(agent_ref__in=refs)
    return {
        "thread_id": thread_id,
        "mission_id": mission.pk,
        "status": mission.status,
        "stop_reason": mission.stop_reason,
        "stop_detail": mission.stop_detail,
        "approvals": list(asked),
    }


def graph_session(actor: Actor, thread_id: str, *, mission_id: int | None = None) -> Run:
    """The session run of a thread, started if needed: for operations a node performs (a node may
    run before LangGraph's background save of the thread's first checkpoint arrives)."""
    with transaction.atomic():
        mission = lock_thread(actor, thread_id, mission_id=mission_id)
        run = session_run(actor, mission, saving=False)
        _beat(run)
        return run
