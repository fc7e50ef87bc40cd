"""What LangGraph does to whole threads: delete one, delete what some of its runs wrote, copy one,
prune old checkpoints. A deleted thread's mission is cancelled and purged like any deleted quest
(the ledger keeps which side effects happened), and the thread id stays taken: LangGraph's own
savers let a late write after a delete recreate the thread half-empty; here it is refused."""

from collections import Counter

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from checkpoints.models import Checkpoint, GraphCheckpoint, GraphWrite, Operation, OperationStatus
from quests.models import GraphThread, Mission, MissionStatus, StopReason, TERMINAL_STATUSES
from quests.retention.services.holds import is_held
from quests.retention.services.purge import purge_missions, release_blobs
from quests.services import machine, pending, savestate
from quests.services.audit import Actor
from quests.services.errors import Conflict, InvalidInput
from quests.services.graph import ThreadDeleted, lock_thread, thread_missions, writes_of
from quests.services.runs import run_end

DELETED_DETAIL = "The LangGraph thread was deleted."


def graph_delete_thread(*, actor: Actor, thread_id: str) -> bool:
    """Delete a thread: its mission is cancelled and its state purged, and the thread id is kept
    as deleted. Deleting a thread that does not exist (or no longer does) changes nothing."""
    with transaction.atomic():
        mission = _existing(actor, thread_id)
        if mission is None:
            return False
        if is_held(mission):
            raise Conflict("This thread's history is on hold and cannot be deleted right now.", code="held")
        if mission.status not in TERMINAL_STATUSES:
            _cancel(actor, mission)
        purge_missions([mission.pk], actor=actor)
        GraphThread.objects.filter(mission=mission).update(deleted_at=timezone.now())
        return True


def _existing(actor: Actor, thread_id: str) -> Mission | None:
    """The live thread's mission, locked; None for a thread that does not exist or was deleted
    (these whole-thread operations then change nothing, as LangGraph's savers do)."""
    try:
        return lock_thread(actor, thread_id, create=False)
    except ThreadDeleted:
        return None


def _cancel(actor: Actor, mission: Mission) -> None:
    run = mission.active_run
    if run is not None and run.ended_at is None:
        run_end(mission, run, event="cancel", to=MissionStatus.CANCELLED, stop_reason=StopReason.CANCELLED_BY_USER, actor=actor, detail=DELETED_DETAIL, checkpoint=False)
    else:
        machine.transition(mission, event="cancel", to=MissionStatus.CANCELLED, actor=actor, stop_reason=StopReason.CANCELLED_BY_USER, detail=DELETED_DETAIL)
        pending.pending_end(mission, actor=actor, because=pending.ENDED)


def _delete_checkpoints(rows) -> int:
    """Delete these LangGraph checkpoints with the Questlog checkpoints they are (and their writes),
    and release the blobs nothing refers to any more."""
    found = list(rows.only("pk", "checkpoint_id", "mission_id", "ns", "graph_id", "channels"))
    candidates = {item[1] for row in found for item in row.channels.values()}
    writes = [write.pk for group in writes_of(found).values() for write in group]
    GraphWrite.objects.filter(pk__in=writes).delete()
    Checkpoint.objects.filter(pk__in=[row.checkpoint_id for row in found]).only("pk").delete()
    release_blobs(candidates)
    return len(found)


def graph_delete_for_runs(*, actor: Actor, run_ids: list[str]) -> int:
    """Delete every checkpoint (and its pending writes) that these LangGraph runs wrote, in all the
    caller's threads and namespaces."""
    if not run_ids:
        return 0
    with transaction.atomic():
        rows = GraphCheckpoint.objects.filter(mission__in=thread_missions(actor), run_ref__in=[str(r) for r in run_ids])
        return _delete_checkpoints(rows)


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
        return _delete_checkpoints(rows)


def graph_copy_thread(*, actor: Actor, source_thread_id: str, target_thread_id: str) -> Mission | None:
    """Copy a thread's checkpoints (every namespace, with metadata and pending writes) into a new
    thread, whose new mission also gets the source's completed side effects: resuming the copy
    must not repeat an email the source sent. A source that does not exist copies nothing."""
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
                mission=target, seq=seq, trigger=original.trigger, hash=original.hash, note=original.note,
                state_refs=original.state_refs, agent_state_refs=original.agent_state_refs, size_bytes=original.size_bytes,
                agent_state_bytes=original.agent_state_bytes, compaction_report=original.compaction_report,
            )
            seq += 1
            mapping[row.pk] = GraphCheckpoint.objects.create(
                checkpoint=copy, mission=target, ns=row.ns, graph_id=row.graph_id, parent_graph_id=row.parent_graph_id,
                skeleton=row.skeleton, metadata=row.metadata, channels=row.channels, run_ref=row.run_ref,
            )
            counts["checkpoints"] += 1
        GraphWrite.objects.bulk_create([
            GraphWrite(
                mission=target, ns=w.ns, graph_id=w.graph_id, task_id=w.task_id, task_path=w.task_path, idx=w.idx,
                channel=w.channel, value=w.value,
            )
            for w in GraphWrite.objects.filter(mission=source)
        ])
        Operation.objects.bulk_create([
            Operation(
                mission=target, key=op.key, request_hash=op.request_hash, kind=op.kind, target=op.target, request=op.request,
                status=op.status, attempts=op.attempts, max_attempts=op.max_attempts, external_id=op.external_id,
                external_status=op.external_status, receipt=op.receipt, completion_hash=op.completion_hash,
            )
            for op in Operation.objects.filter(mission=source, status=OperationStatus.COMPLETED)
        ])
        if mapping:
            last = max(mapping.values(), key=lambda row: row.checkpoint.seq).checkpoint
            target.head_checkpoint, target.next_checkpoint_seq = last, seq
            target.save(update_fields=["head_checkpoint", "next_checkpoint_seq", "updated_at"])
        savestate.state_rebuild(target.pk)
        return target
