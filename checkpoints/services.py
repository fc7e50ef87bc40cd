"""Content-addressed storage of save state. Knows how to hash, dedupe and read checkpoints; knows
nothing about missions beyond their id."""

import hashlib
import json
from typing import Any

from checkpoints import sections
from checkpoints.models import Blob, Checkpoint
from checkpoints.pruning import blob_writers_guard
from checkpoints.roundtrip import Inserted, RoundTrip


def canonical_json(value: Any) -> bytes:
    """The one serialisation that hashes are taken over: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_rows(contents: dict[str, bytes], *, media_type: str = "application/json") -> list[Blob]:
    """Unsaved blob rows for {sha256: content}."""
    return [Blob(sha256=sha, data=content, size_bytes=len(content), media_type=media_type) for sha, content in contents.items()]


def blobs_stage(trip: RoundTrip, blobs: list[Blob]) -> Inserted | None:
    """Add to `trip` the one statement that stores whichever of `blobs` are new (`INSERT … ON
    CONFLICT DO NOTHING`): two writers storing the same content at once both succeed, and the
    step's `inserted` says which rows this writer added. The caller holds the blob writers' lock
    (`blob_writers_guard`) for its transaction."""
    unique = list({blob.sha256: blob for blob in blobs}.values())
    return trip.insert(unique, ignore_conflicts=True) if unique else None


def blobs_put(contents: list[bytes], *, media_type: str = "application/json") -> tuple[list[str], int]:
    """Store each content once. Returns the hashes (in order) and the number of bytes newly stored."""
    hashes = [sha256_hex(c) for c in contents]
    blob_writers_guard()
    trip = RoundTrip()
    step = blobs_stage(trip, blob_rows(dict(zip(hashes, contents)), media_type=media_type))
    trip.run()
    sizes = dict(zip(hashes, map(len, contents)))
    return hashes, sum(sizes[sha] for sha in step.inserted) if step else 0


def blob_put(content: bytes, *, media_type: str = "application/json") -> tuple[str, int]:
    hashes, new_bytes = blobs_put([content], media_type=media_type)
    return hashes[0], new_bytes


def blobs_get(hashes: list[str]) -> dict[str, bytes]:
    return {sha: bytes(data) for sha, data in Blob.objects.filter(sha256__in=list(set(hashes))).values_list("sha256", "data")}


def parts(document: dict[str, Any]) -> tuple[dict[str, str], dict[str, bytes]]:
    """A document split by top-level key: {key: hash} and {hash: canonical JSON}."""
    refs: dict[str, str] = {}
    contents: dict[str, bytes] = {}
    for key in sorted(document):
        content = canonical_json(document[key])
        refs[key] = sha = sha256_hex(content)
        contents[sha] = content
    return refs, contents


def parts_get(refs: dict[str, str], contents: dict[str, bytes] | None = None) -> dict[str, Any]:
    contents = contents if contents is not None else blobs_get(list(refs.values()))
    return {key: json.loads(contents[sha]) for key, sha in refs.items() if sha in contents}


def document_hash(state_refs: dict[str, str], agent_state_refs: dict[str, str]) -> str:
    """A Merkle hash: each part is addressed by the sha256 of its canonical JSON, so hashing the
    canonical JSON of the references identifies the whole content without re-reading it."""
    return sha256_hex(canonical_json({"agent_state": agent_state_refs, "state": state_refs}))


def checkpoint_write(
    *,
    mission_id: int,
    run_id: int | None,
    parent: Checkpoint | None,
    seq: int,
    parent_id: int | None = None,
    trigger: str,
    state: dict[str, Any] | None = None,
    state_refs: dict[str, str] | None = None,
    state_contents: dict[str, bytes] | None = None,
    state_size: int | None = None,
    agent_state: dict[str, Any] | None,
    agent_parts: tuple[dict[str, str], dict[str, bytes], int] | None = None,
    record_watermark: int = 0,
    note: str = "",
    compaction_report: dict[str, Any] | None = None,
    extra_blobs: list[Blob] = (),
    trip: RoundTrip | None = None,
    guarded: bool = False,
    stored: set[str] = frozenset(),
) -> Checkpoint:
    """Write an immutable checkpoint in two round trips: the blobs it needs, then its row.

    The state document comes either whole (`state`) or as refs the caller keeps current
    (`state_refs`, with the contents not stored yet in `state_contents` and the document's total
    size in `state_size`): then nothing of the state is re-serialised here. `agent_state=None`
    carries the parent's agent state over by reference (the system's own checkpoints do that); an
    agent checkpoint needs only its parent's id (`parent_id`). `agent_parts` gives the agent state
    already split: {part: hash}, {hash: content} for the parts that may be new, and the total
    size. A LangGraph checkpoint sends only the channels that changed and refers to the others.
    With `trip`, the row's insert is added to it and the caller runs it with its own statements
    (which may refer to the new row by mission and `seq`); the returned checkpoint has its id
    once the trip has run. The caller holds the mission's lock, and the blob writers' lock when it
    says `guarded` (the agent's write path takes it with the mission's lock, in one statement)."""
    if state is not None:
        state_refs, state_contents = parts(state)
        state_size = sum(len(state_contents[sha]) for sha in state_refs.values())
    state_refs = state_refs or {}
    state_contents = state_contents or {}
    if agent_parts is not None:
        agent_refs, agent_contents, agent_size = agent_parts
    elif agent_state is None:
        agent_refs = dict(parent.agent_state_refs) if parent else {}
        agent_size = parent.agent_state_bytes if parent else 0
        agent_contents: dict[str, bytes] = {}
    else:
        agent_refs, agent_contents = parts(agent_state)
        agent_size = sum(len(agent_contents[sha]) for sha in agent_refs.values())
    if not guarded:
        blob_writers_guard()
    blobs = RoundTrip()
    # `stored`: blobs the caller knows exist (the head's parts); an unchanged part is not sent again.
    sending = {sha: content for sha, content in {**state_contents, **agent_contents}.items() if sha not in stored}
    staged = blobs_stage(blobs, blob_rows(sending) + list(extra_blobs))
    blobs.run()
    counted = {**state_contents, **agent_contents}
    checkpoint = Checkpoint(
        mission_id=mission_id,
        run_id=run_id,
        parent_id=parent.pk if parent is not None else parent_id,
        seq=seq,
        trigger=trigger,
        hash=document_hash(state_refs, agent_refs),
        note=note,
        state_refs=state_refs,
        agent_state_refs=agent_refs,
        record_watermark=record_watermark,
        size_bytes=(state_size or 0) + agent_size,
        agent_state_bytes=agent_size,
        new_bytes=sum(len(counted[sha]) for sha in (staged.inserted if staged else []) if sha in counted),
        compaction_report=compaction_report or {},
    )
    own = trip is None
    trip = trip or RoundTrip()
    trip.insert(checkpoint)
    if own:
        trip.run()
    return checkpoint


def checkpoint_agent_state(checkpoint: Checkpoint) -> dict[str, Any]:
    return parts_get(checkpoint.agent_state_refs)


def state_get(refs: dict[str, str], contents: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A state document as its readers see it: a section stored in chunks is whole again."""
    return sections.merged(parts_get(refs, contents))


def checkpoint_documents(checkpoint: Checkpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state document and the agent state of a checkpoint, read in one query."""
    contents = blobs_get(list(checkpoint.state_refs.values()) + list(checkpoint.agent_state_refs.values()))
    return state_get(checkpoint.state_refs, contents), parts_get(checkpoint.agent_state_refs, contents)
