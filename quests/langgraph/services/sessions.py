"""A LangGraph thread's mission and its session run: the caller's threads, a thread's mission found
and locked (made on first use, or an existing quest joined; titled from the graph's input), and the
run the graph's writes belong to. What `saves`, `reads` and `threads` start from."""

from typing import Literal, overload

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet, Subquery

from checkpoints.pruning import blob_writers_guard_expression
from quests.models import ApprovalStatus, GraphThread, Mission, MissionStatus, Run
from quests.services import machine, missions, runs
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.errors import Conflict, NotFound, ServiceError, mission_not_startable
from quests.services.locking import named_now

SESSION_AGENT = "langgraph"
# What a save may find the mission doing, besides running or ready to run: after an interrupt the
# graph still saves its checkpoint and the writes of its other tasks while the person decides.
WRITES_WHILE_WAITING = (MissionStatus.WAITING_FOR_APPROVAL,)


class ThreadDeleted(ServiceError):
    """410: LangGraph deleted this thread; a late write must not bring it back half-empty."""

    status = 410
    code = "thread_deleted"


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


def titled(mission: Mission, thread_id: str, title: str) -> None:
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
