"""LangGraph checkpoints under Questlog's own moves: a restore that a person makes on the mission
page opens a branch LangGraph resumes from."""

import os
import time
from collections.abc import Callable

from django.db.models import Max
from django.utils import timezone

from checkpoints.models import Checkpoint
from quests.langgraph.models import GraphCheckpoint

# 100-nanosecond intervals between the Gregorian epoch (1582-10-15) and the Unix epoch.
GREGORIAN_OFFSET = 0x01B21DD213814000


def time_ordered_id() -> str:
    """A version 6 UUID (RFC 9562: the timestamp's most significant bits first), the kind of id
    LangGraph gives its checkpoints: as text, a later one sorts after every earlier one."""
    ticks = time.time_ns() // 100 + GREGORIAN_OFFSET
    time_high, time_mid, time_low = ticks >> 28, (ticks >> 12) & 0xFFFF, ticks & 0x0FFF
    rest = int.from_bytes(os.urandom(8)) & 0x3FFFFFFFFFFFFFFF | 0x8000000000000000  # RFC variant
    value = (time_high << 96) | (time_mid << 80) | (0x6 << 76) | (time_low << 64) | rest
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def graph_branch(target: Checkpoint, restore_point: Callable[[], Checkpoint]) -> Checkpoint:
    """A restore to `target`, which `restore_point()` writes a checkpoint of. When the mission holds
    a LangGraph thread, every namespace of the thread goes back to the target too: each subgraph
    namespace that went on after it gets a fork of its own checkpoint at that point (on a restore
    checkpoint of its own), so a subgraph's newest state is never progress the restore abandoned;
    then the last restore checkpoint, which is the mission's head and the one answered, is also
    the thread's newest root checkpoint: a fork of the root's checkpoint at (or just before) the
    target, so the graph resumes from there and re-runs what came after."""
    thread = GraphCheckpoint.objects.filter(mission_id=target.mission_id)
    # LangGraph names a checkpoint when its step ends but saves it in the background, so a subgraph's
    # checkpoints can reach us before the root checkpoint they run under: "at or before the target"
    # goes by the ids' time order (what LangGraph itself lists a thread by) when the target is one of
    # the graph's checkpoints, and by our own order otherwise.
    cutoff = thread.filter(checkpoint=target).aggregate(newest=Max("graph_id"))["newest"]
    if cutoff is not None:
        at_target, after_target, newest_first = thread.filter(graph_id__lte=cutoff), thread.filter(graph_id__gt=cutoff), "-graph_id"
    else:
        at_target, after_target, newest_first = (
            thread.filter(checkpoint__seq__lte=target.seq),
            thread.filter(checkpoint__seq__gt=target.seq),
            "-checkpoint__seq",
        )
    root = at_target.filter(ns="").order_by(newest_first).first()
    if root is None:
        return restore_point()
    moved_on = set(after_target.exclude(ns="").values_list("ns", flat=True))
    for ns in sorted(moved_on):
        source = at_target.filter(ns=ns).order_by(newest_first).first()
        if source is not None:
            _fork(source, restore_point())
    restored = restore_point()
    _fork(root, restored)
    return restored


def _fork(source: GraphCheckpoint, checkpoint: Checkpoint) -> GraphCheckpoint:
    graph_id = time_ordered_id()
    skeleton = {**source.skeleton, "id": graph_id, "ts": timezone.now().isoformat()}
    metadata = {**source.metadata, "source": "fork", "questlog_restored_from": source.graph_id}
    return GraphCheckpoint.objects.create(
        checkpoint=checkpoint,
        mission_id=checkpoint.mission_id,
        ns=source.ns,
        graph_id=graph_id,
        parent_graph_id=source.graph_id,
        skeleton=skeleton,
        metadata=metadata,
        channels=source.channels,
        run_ref=source.run_ref,
    )
