"""LangGraph checkpoints under Questlog's own moves: a restore that a person makes on the mission
page opens a branch LangGraph resumes from."""

import os
import time

from django.utils import timezone

from checkpoints.models import Checkpoint, GraphCheckpoint

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


def graph_branch(target: Checkpoint, restored: Checkpoint) -> GraphCheckpoint | None:
    """When a person restores a mission that holds a LangGraph thread, the restore checkpoint is
    also the thread's newest checkpoint: a copy of the graph's checkpoint at (or just before) the
    target, as a fork of it, so the graph resumes from there and re-runs what came after. Nothing
    for a mission without a thread."""
    source = GraphCheckpoint.objects.filter(checkpoint=target).first() or (
        GraphCheckpoint.objects.filter(mission_id=target.mission_id, ns="", checkpoint__seq__lte=target.seq)
        .order_by("-checkpoint__seq")
        .first()
    )
    if source is None:
        return None
    graph_id = time_ordered_id()
    skeleton = {**source.skeleton, "id": graph_id, "ts": timezone.now().isoformat()}
    metadata = {**source.metadata, "source": "fork", "questlog_restored_from": source.graph_id}
    return GraphCheckpoint.objects.create(
        checkpoint=restored, mission_id=restored.mission_id, ns=source.ns, graph_id=graph_id, parent_graph_id=source.graph_id,
        skeleton=skeleton, metadata=metadata, channels=source.channels, run_ref=source.run_ref,
    )
