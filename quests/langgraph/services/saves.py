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
from typing import Any, Literal, cast, overload

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import Q, QuerySet, Subquery
from django.utils import timezone

from checkpoints.pruning import blob_writers_guard_expression
from quests.engine import graph as engine_graph, runner, writes as engine_writes
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.langgraph.services.channels import channels_known, channels_resolved
from quests.models import ApprovalStatus, GraphThread, Mission, MissionStatus, Run
from quests.services import approvals, machine, missions, runs, savestate, throttle, tokens
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.errors import Conflict, InvalidInput, NotFound, ServiceError, Unauthenticated, mission_not_startable
from quests.services.locking import caller, named_now

SESSION_AGENT = "langgraph"
# What a save may find the mission doing, besides running or ready to run: after an interrupt the
# graph still saves its checkpoint and the writes of its other tasks while the person decides.
WRITES_WHILE_WAITING = (MissionStatus.WAITING_FOR_APPROVAL,)
LIST_LIMIT = 100
# A LangGraph checkpoint has no idempotency key: a retried save answers the saved one (its id).
NO_KEY = engine_writes.Key("checkpoints", None)


class ThreadDeleted(ServiceError):
    """410: LangGraph deleted this thread; a late write must not bring it back half-empty."""

    status = 410
    code = "thread_deleted"


# --- Threads ------------------------------------------------------------------------------------


def thread_missions(actor: Actor) -> QuerySet[Mission]:
    """The caller's missions that hold a live LangGraph thread."""
    return visible(actor, Mission).filter(graph_thread__isnull=False, graph_thread__deleted_at__isnull=True)


def thread_mission_id(actor: Actor, thread_id: str) -> Subquery:
    """The live thread's mission by the (owner, thread id) index, as a value the checkpoints'
    index is then walked with."""
    holder = GraphThread.objects.filter(
        owner_id=actor.user.pk if actor.user else None,
        thread_id=thread_id,
        deleted_at__isnull=True,
        mission__in=visible(actor, Mission),
    )
    return Subquery(holder.values("mission_id")[:1])


@overload
def lock_thread(actor: Actor, thread_id: str, *, title: str = "", create: Literal[True] = True, mission_id: int | None = None) -> Mission: ...
@overload
def lock_thread(actor: Actor, thread_id: str, *, title: str = "", create: bool, mission_id: int | None = None) -> Mission | None: ...
def lock_thread(actor: Actor, thread_id: str, *, title: str = "", create: bool = True, mission_id: int | None = None) -> Mission | None:
    """The mission holding `thread_id`, its row locked (one statement, with its session run and the
    blob writers' lock); created on first use when `create`, or held by the caller's existing
    mission `mission_id` (a quest made in the browser, or by replaycheck). A deleted thread is
    refused."""
    while True:
        rows = visible(actor, Mission).select_for_update(of=("self",)).select_related("active_run", "graph_thread")
        guard = blob_writers_guard_expression()
        if guard is not None:
            rows = rows.annotate(blob_writers_guard=guard)
        mission = rows.filter(graph_thread__thread_id=thread_id).first()
        if mission is not None:
            if mission.graph_thread.deleted_at is not None:
                raise ThreadDeleted(f"Thread {thread_id!r} was deleted; use a new thread id.", thread_id=thread_id)
            return mission
        if not create:
            return None
        _thread_create(actor, thread_id, title=title, mission_id=mission_id)


def _titled(mission: Mission, thread_id: str, title: str) -> None:
    """Title a mission still named after its thread (the locked one) from the graph's input, which
    a save or a task's writes may bring after another call made the thread (LangGraph sends them
    in parallel). (`GRAPH_WRITES_PG` does the same in its statement.)"""
    if title and mission.title == thread_id:
        mission.title, mission.objective = title[:200], title
        mission.save(update_fields=["title", "objective", "updated_at"])


def _thread_create(actor: Actor, thread_id: str, *, title: str, mission_id: int | None) -> None:
    if mission_id is not None:
        mission = _joinable(actor, mission_id)
        held = GraphThread.objects.filter(mission=mission).values_list("thread_id", flat=True).first()
        if held == thread_id:
            return  # a concurrent request (LangGraph saves and writes in parallel) linked it first
        if held is not None:
            raise Conflict(f"Mission {mission_id} already holds another thread.", code="thread_exists")
    try:
        with transaction.atomic():
            if mission_id is None:
                objective = title or f"LangGraph thread {thread_id}"
                mission, _ = missions.mission_create(actor=actor, title=(title or thread_id)[:200], objective=objective)
            GraphThread.objects.create(owner=actor.user, thread_id=thread_id, mission=mission, made_mission=mission_id is None)
    except IntegrityError:
        # Another request created it first: the caller's next lookup finds theirs. Unless the id
        # is held by a mission the caller cannot see (a token limited to another mission): the
        # lookup would never find it.
        if not visible(actor, Mission).filter(graph_thread__owner=actor.user, graph_thread__thread_id=thread_id).exists():
            raise Conflict(f"Thread {thread_id!r} is taken; use another thread id.", code="thread_exists") from None


def _joinable(actor: Actor, mission_id: int) -> Mission:
    """The caller's existing mission that a new thread joins, locked: joining it writes to it as a
    run does, so a mission a person must act on first (waiting, paused, cancelled, …) refuses it
    as it refuses a run."""
    mission = visible(actor, Mission).select_for_update(of=("self",)).filter(pk=mission_id).first()
    if mission is None:
        raise NotFound(f"No mission with id {mission_id}.")
    if mission.status in machine.NOT_STARTABLE:
        raise mission_not_startable(mission.status)
    return mission


@overload
def session_run(actor: Actor, mission: Mission, *, saving: Literal[False]) -> Run: ...
@overload
def session_run(actor: Actor, mission: Mission, *, saving: bool = True) -> Run | None: ...
def session_run(actor: Actor, mission: Mission, *, saving: bool = True) -> Run | None:
    """The run the graph's writes belong to: the mission's active run, or a new one. Saving what
    the graph did up to an interrupt while the mission waits for a person needs none (`saving`):
    a graph invoked again before the decision stops at the same interrupt, asking nothing new."""
    # Read again if another request started a run since the lock's join was read.
    run = named_now(mission, "active_run")
    if run is not None and not run.is_stale():
        return run
    if saving and mission.status in WRITES_WHILE_WAITING and _waits_for_the_graph(mission):
        return None
    # run_start ends a stale run first and refuses a paused, cancelled or waiting mission.
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent=SESSION_AGENT)
    mission.refresh_from_db()
    mission.active_run = run
    return run


def _waits_for_the_graph(mission: Mission) -> bool:
    """The mission waits for the graph's own interrupts (asked by its session run, or while it
    waited), not for a question another agent asked: that one holds every write until answered."""
    return (
        mission.approvals.filter(
            Q(run__isnull=True) | Q(run__agent=SESSION_AGENT),
            status=ApprovalStatus.PENDING,
        )
        .exclude(agent_ref="")
        .exists()
    )


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
        _titled(mission, thread_id, title)
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
        checkpoint = savestate.take_checkpoint(
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
    """The save in two autocommit statements, as the agent's checkpoint is made (PostgreSQL): who
    calls, the live thread's mission and session run read without a lock, then the checkpoint and
    its row written only if the mission row is still as read. Without the save (None), nothing is
    written and the locked path saves it, for the actor returned: a first save or a deleted thread,
    a save already made, a session run to start, a channel its parent does not hold, or a mission
    that moved after the read."""
    credentials = actor if isinstance(actor, engine_writes.Credentials) else None
    # An agent token's request is counted against its rate by the same statement where the cache allows.
    counting = throttle.api_counting(credentials.token_hash) if credentials else None
    read = engine_graph.graph_put_read(
        credentials or caller(cast(Actor, actor)),
        thread_id=thread_id,
        ns=row.ns,
        graph_id=row.graph_id,
        parent_graph_id=row.parent_graph_id,
        count=counting,
    )
    if read is None:
        raise Unauthenticated(Unauthenticated.MESSAGE)
    who, seen = read
    if credentials is not None:
        throttle.api_request_count(credentials.token_hash, receipt=False, counted=counting)
    use_due = who.token_id if tokens.use_due(who.token_last_used_at) else None

    def locked_path() -> tuple[None, Actor]:
        # Authenticated again in full for the locked path (its token's use recorded then); the
        # request was counted by the read.
        return None, (tokens.credentials_actor(credentials, counted=True) if credentials else cast(Actor, actor))

    if seen is None or seen.known or seen.locked.run.is_stale():
        return locked_path()
    resolved, contents, missing = channels_known(versions, channels, seen.parent_channels)
    if missing:
        return locked_path()
    refs = {name: sha for name, (_, sha, _) in resolved.items()}
    row = replace(row, channels={name: list(item) for name, item in resolved.items()})
    agent_parts = (refs, contents, sum(item[2] for item in resolved.values()))
    claim = replace(engine_graph.graph_claim(seen, row), used_token_id=use_due)
    checkpoint = savestate.take_checkpoint_unless_moved(seen.locked, agent_parts=agent_parts, note=note, key=NO_KEY, claim=claim)
    if checkpoint is None:
        return locked_path()
    saved = GraphCheckpoint(id=seen.graph_row_id, checkpoint=checkpoint, mission_id=checkpoint.mission_id, created_at=checkpoint.created_at, **vars(row))
    saved._state.adding, saved._state.db = False, DEFAULT_DB_ALIAS
    return saved, cast(Actor, actor)


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
        # An agent token's request is counted against its rate by the same statement where the cache allows.
        counting = throttle.api_counting(credentials.token_hash) if credentials else None
        with transaction.atomic():
            kept = engine_graph.graph_writes_put(credentials or caller(cast(Actor, actor)), put, fresh_after=fresh_after, count=counting)
        if kept is None:
            raise Unauthenticated(Unauthenticated.MESSAGE)
        who, written = kept
        if credentials is not None:
            throttle.api_request_count(credentials.token_hash, receipt=False, counted=counting)
            if written is None:
                # Authenticated again in full for the general path (its token's use recorded then).
                actor = tokens.credentials_actor(credentials, counted=True)
            elif tokens.use_due(who.token_last_used_at):
                tokens.token_used(who.token_id)
        if written is not None:
            return []
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
        _titled(mission, thread_id, title)
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
