"""Content-addressed storage of save state. Knows how to hash, dedupe and read checkpoints; knows
nothing about missions beyond their id."""

import hashlib
import json
from typing import Any

from django.db import transaction

from checkpoints.models import Blob, Checkpoint
from checkpoints.pruning import blob_writers_guard


def canonical_json(value: Any) -> bytes:
    """The one serialisation that hashes are taken over: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blobs_put(contents: list[bytes], *, media_type: str = "application/json") -> tuple[list[str], int]:
    """Store each content once. Returns the hashes (in order) and the number of bytes newly stored."""
    by_hash = {sha256_hex(c): c for c in contents}
    hashes = [sha256_hex(c) for c in contents]
    blob_writers_guard()
    existing = set(Blob.objects.filter(sha256__in=list(by_hash)).values_list("sha256", flat=True))
    new = [
        Blob(sha256=h, data=c, size_bytes=len(c), media_type=media_type)
        for h, c in by_hash.items()
        if h not in existing
    ]
    if new:
        # Two writers may store the same content at once; the loser's row is simply not needed.
        Blob.objects.bulk_create(new, ignore_conflicts=True)
    return hashes, sum(b.size_bytes for b in new)


def blob_put(content: bytes, *, media_type: str = "application/json") -> tuple[str, int]:
    hashes, new_bytes = blobs_put([content], media_type=media_type)
    return hashes[0], new_bytes


def blobs_get(hashes: list[str]) -> dict[str, bytes]:
    return {sha: bytes(data) for sha, data in Blob.objects.filter(sha256__in=list(set(hashes))).values_list("sha256", "data")}


def parts_put(document: dict[str, Any]) -> tuple[dict[str, str], int, int]:
    """Store a document by top-level key. Returns {key: hash}, its total size and new bytes."""
    keys = sorted(document)
    contents = [canonical_json(document[k]) for k in keys]
    hashes, new_bytes = blobs_put(contents)
    return dict(zip(keys, hashes)), sum(len(c) for c in contents), new_bytes


def parts_get(refs: dict[str, str], contents: dict[str, bytes] | None = None) -> dict[str, Any]:
    contents = contents if contents is not None else blobs_get(list(refs.values()))
    return {key: json.loads(contents[sha]) for key, sha in refs.items() if sha in contents}


def document_hash(state_refs: dict[str, str], agent_state_refs: dict[str, str]) -> str:
    """A Merkle hash: each part is addressed by the sha256 of its canonical JSON, so hashing the
    canonical JSON of the references identifies the whole content without re-reading it."""
    return sha256_hex(canonical_json({"agent_state": agent_state_refs, "state": state_refs}))


# No savepoint: callers write under the mission's lock in a transaction of their own, and a
# failure here fails that whole transaction anyway; a savepoint would only add two round trips.
@transaction.atomic(savepoint=False)
def checkpoint_write(
    *,
    mission_id: int,
    run_id: int | None,
    parent: Checkpoint | None,
    seq: int,
    trigger: str,
    state: dict[str, Any],
    agent_state: dict[str, Any] | None,
    record_watermark: int = 0,
    note: str = "",
    compaction_report: dict[str, Any] | None = None,
) -> Checkpoint:
    """Write an immutable checkpoint. `agent_state=None` carries the parent's agent state over
    by reference (the system's own checkpoints do that), at no storage cost."""
    state_refs, state_size, new_bytes = parts_put(state)
    if agent_state is None:
        agent_refs = dict(parent.agent_state_refs) if parent else {}
        agent_size = parent.agent_state_bytes if parent else 0
    else:
        agent_refs, agent_size, agent_new = parts_put(agent_state)
        new_bytes += agent_new
    return Checkpoint.objects.create(
        mission_id=mission_id,
        run_id=run_id,
        parent=parent,
        seq=seq,
        trigger=trigger,
        hash=document_hash(state_refs, agent_refs),
        note=note,
        state_refs=state_refs,
        agent_state_refs=agent_refs,
        record_watermark=record_watermark,
        size_bytes=state_size + agent_size,
        agent_state_bytes=agent_size,
        new_bytes=new_bytes,
        compaction_report=compaction_report or {},
    )


def checkpoint_agent_state(checkpoint: Checkpoint) -> dict[str, Any]:
    return parts_get(checkpoint.agent_state_refs)


def checkpoint_documents(checkpoint: Checkpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state document and the agent state of a checkpoint, read in one query."""
    contents = blobs_get(list(checkpoint.state_refs.values()) + list(checkpoint.agent_state_refs.values()))
    return parts_get(checkpoint.state_refs, contents), parts_get(checkpoint.agent_state_refs, contents)
