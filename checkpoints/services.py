"""Content-addressed storage of save state. Knows how to hash, dedupe and read checkpoints; knows
nothing about missions beyond their id."""

import json
from typing import Any

from checkpoints import refmaps, sections

# Re-exported: where every caller imports them from.
from checkpoints.hashing import canonical_json as canonical_json, sha256_hex as sha256_hex
from checkpoints.models import Blob, Checkpoint
from checkpoints.pruning import blob_writers_guard


def blob_rows(contents: dict[str, bytes], *, media_type: str = "application/json") -> list[Blob]:
    """Unsaved blob rows for {sha256: content}."""
    return [Blob(sha256=sha, data=content, size_bytes=len(content), media_type=media_type) for sha, content in contents.items()]


def blobs_put(contents: list[bytes], *, media_type: str = "application/json") -> tuple[list[str], int]:
    """Store each content once (`INSERT … ON CONFLICT DO NOTHING`: two writers storing the same
    content at once both succeed). Returns the hashes (in order) and the number of bytes newly
    stored. Off the agent's hot path (its writes store blobs in the engine's statements)."""
    hashes = [sha256_hex(c) for c in contents]
    blob_writers_guard()
    sizes = dict(zip(hashes, map(len, contents)))
    existing = set(Blob.objects.filter(sha256__in=list(sizes)).values_list("sha256", flat=True))
    Blob.objects.bulk_create(blob_rows(dict(zip(hashes, contents)), media_type=media_type), ignore_conflicts=True)
    return hashes, sum(size for sha, size in sizes.items() if sha not in existing)


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


def joined(refs: dict[str, str], contents: dict[str, bytes]) -> bytes:
    """The canonical JSON of a document from its `parts` (refs in key order), without serialising
    it again: the same bytes as `canonical_json(document)`."""
    return b"{" + b",".join(canonical_json(key) + b":" + contents[sha] for key, sha in refs.items()) + b"}"


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
    trigger: str,
    state: dict[str, Any] | None = None,
    agent_state: dict[str, Any] | None = None,
    note: str = "",
) -> Checkpoint:
    """Write an immutable checkpoint of whole documents, through the ORM: for tools, tests and
    benchmarks that build histories by hand. The services write checkpoints through the engine
    (`quests.engine.checkpoints.checkpoint_write`), which also moves the mission's head.
    `agent_state=None` carries the parent's agent state over by reference."""
    state_refs, state_contents = parts(state or {})
    if agent_state is None:
        agent_refs = dict(parent.agent_state_refs) if parent else {}
        agent_size = parent.agent_state_bytes if parent else 0
        agent_contents: dict[str, bytes] = {}
    else:
        agent_refs, agent_contents = parts(agent_state)
        agent_size = sum(len(agent_contents[sha]) for sha in agent_refs.values())
    contents = {**state_contents, **agent_contents}
    _, new_bytes = blobs_put(list(contents.values()))
    checkpoint = Checkpoint(
        mission_id=mission_id,
        run_id=run_id,
        parent=parent,
        seq=seq,
        trigger=trigger,
        hash=document_hash(state_refs, agent_refs),
        note=note,
        size_bytes=sum(len(state_contents[sha]) for sha in state_refs.values()) + agent_size,
        agent_state_bytes=agent_size,
        new_bytes=new_bytes,
    )
    checkpoint.state_refs = state_refs
    checkpoint.agent_layout = refmaps.agent_layout(agent_refs, parent.agent_layout if parent else None)
    checkpoint.save(force_insert=True)
    return checkpoint


def checkpoint_agent_state(checkpoint: Checkpoint) -> dict[str, Any]:
    return parts_get(checkpoint.agent_state_refs)


def ledger_expanded(refs: dict[str, str], contents: dict[str, bytes] | None = None) -> tuple[dict[str, str], dict[str, bytes]]:
    """A state document's refs with each ledger group (format 3) replaced by the refs of its
    chunks, and the contents of them all (`contents`: those read already; the groups and chunks
    missing from them are read here). A group whose blob is gone is left out, as `parts_get`
    leaves out a part."""
    if contents is None:
        contents = blobs_get(list(refs.values()))
    groups = sections.ledger_groups(refs)
    if not groups:
        return refs, contents
    if missing := [sha for sha in groups.values() if sha not in contents]:
        contents = {**contents, **blobs_get(missing)}
    expanded = {name: sha for name, sha in refs.items() if name not in groups}
    for sha in groups.values():
        if sha in contents:
            expanded.update(sections.group_chunks(contents[sha]))
    if missing := [sha for sha in expanded.values() if sha not in contents]:
        contents = {**contents, **blobs_get(missing)}
    return expanded, contents


def state_get(refs: dict[str, str], contents: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A state document as its readers see it: a section stored in chunks is whole again."""
    return sections.merged(parts_get(*ledger_expanded(refs, contents)))


def checkpoint_documents(checkpoint: Checkpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state document and the agent state of a checkpoint, read in one query (and one more for
    the ledger's chunks, which its groups name)."""
    contents = blobs_get(list(checkpoint.state_refs.values()) + list(checkpoint.agent_state_refs.values()))
    return state_get(checkpoint.state_refs, contents), parts_get(checkpoint.agent_state_refs, contents)
