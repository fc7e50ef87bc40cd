"""What LangGraph does to whole threads: delete one, delete what some of its runs wrote, copy one,
prune old checkpoints. Each deletes what the thread itself made: its LangGraph rows, and only
when the thread made its mission (and the person did not choose to keep it), that mission's
working state too; a person's own quest, or one they kept, stays whole (its Questlog checkpoints
included), and held state is never deleted. A deleted thread's mission is ended and purged like
any deleted quest (the ledger keeps which side effects happened), and the thread id stays taken:
LangGraph's own savers let a late write after a delete recreate the thread half-empty; here it is
refused. Every deletion is audited as whoever asked for it."""

from collections import Counter
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, OperationStatus
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.langgraph.services.reads import writes_of
from quests.langgraph.services.sessions import ThreadDeleted, lock_thread, thread_missions
from quests.models import TERMINAL_STATUSES, GraphThread, Mission, MissionStatus, StopReason
from quests.retention.services.holds import held_mission_ids, held_user_ids
from quests.retention.services.purge import purge_missions, release_blobs
from quests.services import machine, pending, savestate
from quests.services.access import require_whole_account
from quests.services.audit import Actor, audit
from quests.services.errors import Conflict, InvalidInput
from quests.services.runs import run_end

DELETED_DETAIL = "The LangGraph thread was deleted."


def graph_delete_thread(*, actor: Actor, thread_id: str) -> bool:
    """Delete a thread: its LangGraph rows go and the thread id is kept as deleted. A mission the
    thread made (and nobody kept) is ended and purged with it; any other stays as it is.
    Deleting a thread that does not exist (or no longer does) changes nothing."""
    with transaction.atomic():
        mission = _existing(actor, thread_id)
        if mission is None:
            return False
        _refuse_held([mission.pk])
        ends_mission = bool(_made_and_not_kept([mission.pk]))
        if ends_mission:
            if mission.status not in TERMINAL_STATUSES:
                _end(actor, mission)
            purge_missions([mission.pk], actor=actor)
        else:
            _delete_rows(_loaded(GraphCheckpoint.objects.filter(mission=mission)), keep_checkpoints_of={mission.pk})
            GraphWrite.objects.filter(mission=mission).delete()
        thread = mission.graph_thread
        GraphThread.objects.filter(pk=thread.pk).update(deleted_at=timezone.now())
        audit(
            actor=actor,
            mission=mission,
            entity="graph_thread",
            entity_id=thread.pk,
            action="delete",
            from_state="live",
            to_state="deleted",
            thread_id=thread_id,
            mission_ended=ends_mission,
        )
        return True


def _existing(actor: Actor, thread_id: str) -> Mission | None:
    """The live thread's mission, locked; None for a thread that does not exist or was deleted
    (these whole-thread operations then change nothing, as LangGraph's savers do)."""
    try:
        return lock_thread(actor, thread_id, create=False)
    except ThreadDeleted:
        return None


def _refuse_held(mission_ids: Iterable[int]) -> None:
    held = Mission.objects.filter(pk__in=list(mission_ids)).filter(Q(pk__in=held_mission_ids()) | Q(owner_id__in=held_user_ids()))
    if held.exists():
        raise Conflict("This thread's history is on hold and cannot be deleted right now.", code="held")


def _made_and_not_kept(mission_ids: Iterable[int]) -> set[int]:
    """Of these missions, those whose working state is the thread's to delete: made by their
    thread, and not kept by their person."""
    return set(
        Mission.objects.filter(pk__in=list(mission_ids), graph_thread__made_mission=True, retention_approved_at__isnull=True).values_list("pk", flat=True)
    )


def _end(actor: Actor, mission: Mission) -> None:
    # A person deleting the thread cancels; an agent's deletion is recorded as the agent's.
    reason = StopReason.CANCELLED_BY_USER if actor.is_person else StopReason.THREAD_DELETED
    run = mission.active_run
    if run is not None and run.ended_at is None:
        run_end(mission, run, event="cancel", to=MissionStatus.CANCELLED, stop_reason=reason, actor=actor, detail=DELETED_DETAIL, checkpoint=False)
    else:
        machine.transition(mission, event="cancel", to=MissionStatus.CANCELLED, actor=actor, stop_reason=reason, detail=DELETED_DETAIL)
        pending.pending_end(mission, actor=actor, because=pending.ENDED)


def _loaded(rows: QuerySet[GraphCheckpoint]) -> list[GraphCheckpoint]:
    return list(rows.only("pk", "checkpoint_id", "mission_id", "ns", "graph_id", "channels"))


def _delete_rows(found: list[GraphCheckpoint], *, keep_checkpoints_of: set[int]) -> None:
    """Delete these LangGraph checkpoints with the Questlog checkpoints they are, except in the
    missions of `keep_checkpoints_of` (those keep their Questlog checkpoints: only the LangGraph
    row goes), and release the blobs nothing refers to any more."""
    candidates = {item[1] for row in found for item in row.channels.values()}
    Checkpoint.objects.filter(pk__in=[row.checkpoint_id for row in found if row.mission_id not in keep_checkpoints_of]).only("pk").delete()
    GraphCheckpoint.objects.filter(pk__in=[row.pk for row in found if row.mission_id in keep_checkpoints_of]).delete()
    release_blobs(candidates)


def _delete_checkpoints(actor: Actor, rows: QuerySet[GraphCheckpoint], *, action: str) -> int:
    """Delete these LangGraph checkpoints and their pending writes, as `_delete_rows` says, after
    refusing if any of their missions is held; audited per mission."""
    found = _loaded(rows)
    counts = Counter(row.mission_id for row in found)
    if not counts:
        return 0
    _refuse_held(counts)
    keep = set(counts) - _made_and_not_kept(counts)
    GraphWrite.objects.filter(pk__in=[write.pk for group in writes_of(found).values() for write in group]).delete()
    _delete_rows(found, keep_checkpoints_of=keep)
    for mission in Mission.objects.filter(pk__in=list(counts)).select_related("graph_thread"):
        audit(
            actor=actor,
            mission=mission,
            entity="graph_thread",
            entity_id=mission.graph_thread.pk,
            action=action,
            checkpoints=counts[mission.pk],
            checkpoints_kept=mission.pk in keep,
        )
    return len(found)


def graph_delete_for_runs(*, actor: Actor, run_ids: list[str]) -> int:
    """Delete every checkpoint (and its pending writes) that these LangGraph runs wrote, in all the
    caller's threads and namespaces."""
    if not run_ids:
        return 0
    with transaction.atomic():
        rows = GraphCheckpoint.objects.filter(mission__in=thread_missions(actor), run_ref__in=[str(r) for r in run_ids])
        return _delete_checkpoints(actor, rows, action="delete_for_runs")


def graph_prune(*, actor: Actor, thread_ids: list[str], strategy: str = "keep_latest") -> int:
    """`keep_latest`: keep each namespace's newest checkpoint (with its pending writes) and delete
    the rest; `delete`: delete every checkpoint of the threads (the threads stay)."""
    if strategy not in ("keep_latest", "delete"):
        raise InvalidInput("strategy must be keep_latest or delete.", field="strategy")
    if not thread_ids:
        return 0
    with transaction.atomic():
        rows = GraphCheckpoint.objects.filter(mission__in=thread_missions(actor), mission__graph_thread__thread_id__in=thread_ids)
        if strategy == "keep_latest":
            newest = rows.values("mission_id", "ns").annotate(newest=Max("graph_id"))
            for group in list(newest):
                rows = rows.exclude(mission_id=group["mission_id"], ns=group["ns"], graph_id=group["newest"])
        return _delete_checkpoints(actor, rows, action="prune")


def graph_copy_thread(*, actor: Actor, source_thread_id: str, target_thread_id: str) -> Mission | None:
    """Copy a thread's checkpoints (every namespace, with metadata and pending writes) into a new
    thread, whose new mission also gets the source's completed side effects: resuming the copy
    must not repeat an email the source sent. A source that does not exist copies nothing. The
    copy is a new mission: a token limited to one mission is refused before anything is looked
    up, so its answer says nothing about the owner's other threads."""
    require_whole_account(actor)
    with transaction.atomic():
        source = _existing(actor, source_thread_id)
        if source is None:
            return None
        # The copy is a new thread: one that exists (even deleted, even without checkpoints) is refused.
        if GraphThread.objects.filter(owner=actor.user, thread_id=target_thread_id).exists():
            raise Conflict(f"Thread {target_thread_id!r} already exists.", code="thread_exists")
        target = lock_thread(actor, target_thread_id, title=f"{source.title} (copy)"[:200])
        counts: Counter = Counter()
        mapping: dict[int, GraphCheckpoint] = {}
        seq = target.next_checkpoint_seq
        for row in GraphCheckpoint.objects.filter(mission=source).select_related("checkpoint").order_by("checkpoint__seq"):
            original = row.checkpoint
            copy = Checkpoint.objects.create(
                mission=target,
                seq=seq,
                trigger=original.trigger,
                hash=original.hash,
                note=original.note,
                # The copy shares the original's reference maps.
                state_map_id=original.state_map_id,
                agent_map_id=original.agent_map_id,
                agent_delta=original.agent_delta,
                size_bytes=original.size_bytes,
                agent_state_bytes=original.agent_state_bytes,
                report_id=original.report_id,
            )
            seq += 1
            mapping[row.pk] = GraphCheckpoint.objects.create(
                checkpoint=copy,
                mission=target,
                ns=row.ns,
                graph_id=row.graph_id,
                parent_graph_id=row.parent_graph_id,
                skeleton=row.skeleton,
                metadata=row.metadata,
                channels=row.channels,
                run_ref=row.run_ref,
            )
            counts["checkpoints"] += 1
        GraphWrite.objects.bulk_create(
            [
                GraphWrite(
                    mission=target,
                    ns=w.ns,
                    graph_id=w.graph_id,
                    task_id=w.task_id,
                    task_path=w.task_path,
                    idx=w.idx,
                    channel=w.channel,
                    value=w.value,
                )
                for w in GraphWrite.objects.filter(mission=source)
            ]
        )
        Operation.objects.bulk_create(
            [
                Operation(
                    mission=target,
                    key=op.key,
                    request_hash=op.request_hash,
                    kind=op.kind,
                    target=op.target,
                    request=op.request,
                    status=op.status,
                    attempts=op.attempts,
                    max_attempts=op.max_attempts,
                    external_id=op.external_id,
                    external_status=op.external_status,
                    receipt=op.receipt,
                    completion_hash=op.completion_hash,
                )
                for op in Operation.objects.filter(mission=source, status=OperationStatus.COMPLETED)
            ]
        )
        if mapping:
            last = max(mapping.values(), key=lambda row: row.checkpoint.seq).checkpoint
            target.head_checkpoint, target.next_checkpoint_seq = last, seq
            target.save(update_fields=["head_checkpoint", "next_checkpoint_seq", "updated_at"])
        savestate.state_rebuild(target.pk)
        return target
