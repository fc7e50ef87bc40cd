"""The hashed sections of a state document: how each is serialised and laid out in storage.

A checkpoint's hash is taken over the canonical JSON of its sections, so what goes into a section
is decided here, by storage, and versioned: the API's output schemas may gain fields without
changing any mission's state hash. A serialiser that must change gets a new FORMAT; a checkpoint
already written keeps the refs (and so the hash) it was written with, and a mission's current
document made under an older FORMAT is rebuilt the next time it is used (`is_current`).

Formats:
1. every section whole, items as the API's schemas of the time dumped them (times left out);
2. the same items (the serialisers below reproduce format 1's bytes), with the operation ledger
   stored in chunks of LEDGER_CHUNK operations, oldest first: a receipt rewrites one chunk. A
   chunk is the part `operations@<first id>`; a reader sees the ledger whole again (`merged`).
3. the same chunks, gathered in groups of LEDGER_FANOUT: the document holds one part per group,
   `operations#<first id>`, whose content is the map of its chunks' refs ({chunk's part name:
   sha256}); the chunks are blobs that only their group names. In format 2 the document (the
   mission row, and every checkpoint's map) held one ref per 50 operations, which every call
   read and wrote: at 10,000 operations a receipt cost 1.8× and an agent checkpoint 1.7× what
   they cost at 10. Now a receipt rewrites its chunk, its group's map and one ref of the
   document, which holds one ref per 2,500 operations: the same cost at 10 and at 10,000.
   Readers replace each group by its chunks (`checkpoints.services.ledger_expanded`) first.

Rows are the dicts of `.values(*COLUMNS[section])`. This layer imports nothing from `quests`: it
names the columns it reads."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoints.hashing import canonical_json, sha256_hex

FORMAT = 3
LEDGER_CHUNK = 50
# Chunks per group: a group's map is ~4 KB at most, and the document holds one ref per
# LEDGER_CHUNK × LEDGER_FANOUT operations.
LEDGER_FANOUT = 50
CHUNKED = ("operations",)
SEPARATOR = "@"
# An id past every operation's: the chunk that "holds" an operation about to be planned is the last.
PAST_EVERY_ID = 2**62
GROUP_SEPARATOR = "#"

COLUMNS = {
    "operations": (
        "id",
        "key",
        "kind",
        "target",
        "request",
        "status",
        "attempts",
        "max_attempts",
        "external_id",
        "external_status",
        "receipt",
        "error",
        "retryable",
    ),
    "milestones": ("id", "kind", "title", "review_status", "note", "gate", "mission_id", "summary", "evidence", "checkpoint_id"),
    "approvals": (
        "id",
        "action",
        "payload",
        "reason",
        "status",
        "decided_payload",
        "note",
        "agent_ref",
        "always",
        "node",
        "question",
        "mission_id",
        "checkpoint_id",
        "respond_by",
    ),
    "mission": ("title", "objective", "status", "stop_reason", "stop_detail", "retry_at"),
}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def operation_item(row: dict[str, Any]) -> dict[str, Any]:
    # "" is stored for "not yet"; the document has always said null.
    empty_is_null = {"external_id", "external_status", "error"}
    return {name: (row[name] or None) if name in empty_is_null else row[name] for name in COLUMNS["operations"]}


def milestone_item(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in COLUMNS["milestones"]}


def approval_item(row: dict[str, Any]) -> dict[str, Any]:
    item = {name: row[name] for name in COLUMNS["approvals"] if name != "respond_by"}
    # The document's `expires_at` is when a person must answer (not the retention expiry).
    item["expires_at"] = _iso(row["respond_by"])
    return item


def mission_item(row: Any) -> dict[str, Any]:
    """The `mission` section, from the mission row (an object: it is the locked row)."""
    item = {name: getattr(row, name) for name in COLUMNS["mission"]}
    item["retry_at"] = _iso(item["retry_at"])
    return item


ITEMS = {"operations": operation_item, "milestones": milestone_item, "approvals": approval_item}


def chunk_key(section: str, first_id: int) -> str:
    return f"{section}{SEPARATOR}{first_id}"


def chunk_of(key: str) -> tuple[str, int] | None:
    """(section, first id) of a chunk's part name; None for a whole section."""
    section, sep, first = key.partition(SEPARATOR)
    return (section, int(first)) if sep and section in CHUNKED and first.isdigit() else None


def chunks(section: str, items: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The parts of a chunked section's items (in id order): full chunks of LEDGER_CHUNK, then the
    rest. The same items always give the same parts, whether written at once or one by one."""
    for start in range(0, len(items), LEDGER_CHUNK):
        part = items[start : start + LEDGER_CHUNK]
        yield chunk_key(section, part[0]["id"]), part


def group_key(first_id: int) -> str:
    return f"operations{GROUP_SEPARATOR}{first_id}"


def group_of(key: str) -> int | None:
    """The first id of a ledger group's part name; None for any other part."""
    section, sep, first = key.partition(GROUP_SEPARATOR)
    return int(first) if sep and section == "operations" and first.isdigit() else None


def is_ledger_part(key: str) -> bool:
    """Whether a part of a document holds (some of) the ledger, in any format."""
    return key == "operations" or chunk_of(key) is not None or group_of(key) is not None


@dataclass
class LedgerParts:
    """Ledger parts a change (or a rebuild) makes: the groups ({part name: canonical JSON of its
    chunks' refs}) the document refers to, each group's size (the bytes of its chunks, what the
    document's size counts) and the chunks' contents ({sha256: canonical JSON}) the groups name."""

    groups: dict[str, bytes] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    chunks: dict[str, bytes] = field(default_factory=dict)


def ledger_parts(items: list[dict[str, Any]]) -> LedgerParts:
    """The ledger's parts for all its items (in id order): `chunks`, gathered LEDGER_FANOUT at a
    time into groups named by their first chunk's first id. The same items always give the same
    parts, whether written at once or one change at a time (`ledger_change`)."""
    made = LedgerParts()
    chunked = [(name, canonical_json(part)) for name, part in chunks("operations", items)]
    for start in range(0, len(chunked), LEDGER_FANOUT):
        members = chunked[start : start + LEDGER_FANOUT]
        index = {}
        for name, content in members:
            index[name] = sha = sha256_hex(content)
            made.chunks[sha] = content
        group = group_key(chunk_of(members[0][0])[1])  # type: ignore[index]
        made.groups[group] = canonical_json(index)
        made.sizes[group] = sum(len(content) for _, content in members)
    return made


@dataclass(frozen=True)
class LedgerChunk:
    """A ledger chunk as the current document stores it, with its group: the chunk's first id and
    canonical JSON (None and b"[]": the ledger has no chunk yet), the group's first id and its map
    of chunk refs as stored (None and b"{}": no group yet)."""

    first: int | None
    content: bytes
    group_first: int | None = None
    group: bytes = b"{}"


NO_LEDGER = LedgerChunk(first=None, content=b"[]")


def ledger_change(chunk: LedgerChunk, item: dict[str, Any], group_size: int) -> LedgerParts:
    """The parts a change of one operation makes, from its chunk and group as stored (`group_size`:
    the group's size before): the chunk rewritten (`chunk_with`) and its group's map with the
    chunk's new ref, or, for a new chunk when the group holds LEDGER_FANOUT already, a group of
    its own."""
    [(name, content)] = chunk_with(chunk.first, chunk.content, item).items()
    first = chunk_of(name)[1]  # type: ignore[index]
    index = group_chunks(chunk.group) if chunk.group_first is not None else {}
    if chunk.group_first is None or (name not in index and len(index) >= LEDGER_FANOUT):
        group_first, index, size = first, {}, 0
    else:
        group_first, size = chunk.group_first, group_size - (len(chunk.content) if first == chunk.first else 0)
    index[name] = sha = sha256_hex(content)
    group = group_key(group_first)
    return LedgerParts(groups={group: canonical_json(index)}, sizes={group: size + len(content)}, chunks={sha: content})


def group_chunks(group: bytes) -> dict[str, str]:
    """A group's map of chunk refs, from its stored content."""
    return json.loads(group)


def ledger_groups(refs: dict[str, str]) -> dict[str, str]:
    """A document's ledger groups among its refs ({part name: blob sha256})."""
    return {name: sha for name, sha in refs.items() if group_of(name) is not None}


_DECODER = json.JSONDecoder()


def chunk_with(first: int | None, content: bytes, item: dict[str, Any]) -> dict[str, bytes]:
    """The ledger parts a change makes ({part name: canonical JSON}) from the chunk that holds the
    operation (`first`, its first id, and `content`, its canonical JSON; None and b"[]": no chunk
    yet): the item put in place of the operation's, or a new operation's item added after the last
    one (in a chunk of its own when that one is full) — what `chunks` would make of the chunk's
    items so changed. The other items' bytes are kept as stored: only the changed one is dumped."""
    text = content.decode()
    spans: list[tuple[int, int, int]] = []  # (id, start, end) of each item in `text`
    position = 1
    while text[position] != "]":
        found, end = _DECODER.raw_decode(text, position)
        spans.append((found["id"], position, end))
        position = end + (text[end] == ",")
    dumped = canonical_json(item).decode()
    if first is None or len(spans) >= LEDGER_CHUNK and item["id"] > spans[-1][0]:
        return {chunk_key("operations", item["id"]): f"[{dumped}]".encode()}
    for op_id, start, end in spans:
        if op_id == item["id"]:
            return {chunk_key("operations", first): (text[:start] + dumped + text[end:]).encode()}
    if spans and item["id"] < spans[-1][0]:
        raise ValueError(f"Operation {item['id']} is not in the ledger chunk read for it.")
    return {chunk_key("operations", first): (text[:-1] + ("," if spans else "") + dumped + "]").encode()}


def merged(document: dict[str, Any]) -> dict[str, Any]:
    """A state document as a reader sees it: each chunked section whole again, its chunks in order.
    A document of format 1 (the section whole) is returned as it is; a later one with no chunk of
    a section has the section empty. Its groups (format 3) were replaced by their chunks first
    (`checkpoints.services.ledger_expanded`)."""
    whole: dict[str, Any] = {}
    parts: dict[str, list[tuple[int, list[Any]]]] = {}
    for key, value in document.items():
        chunk = chunk_of(key)
        if group_of(key) is not None:
            continue  # a group whose chunks were not read: left out, as a part whose blob is gone
        if chunk is None:
            whole[key] = value
        else:
            parts.setdefault(chunk[0], []).append((chunk[1], value))
    for section in CHUNKED:
        if section not in whole and (section in parts or whole):
            whole[section] = [item for _, value in sorted(parts.get(section, [])) for item in value]
    return whole


def merged_raw(parts: dict[str, bytes]) -> dict[str, bytes]:
    """`merged` for stored canonical JSON, without parsing it: a chunked section's parts are
    JSON lists, joined into one."""
    whole: dict[str, bytes] = {}
    found: dict[str, list[tuple[int, bytes]]] = {}
    for key, content in parts.items():
        chunk = chunk_of(key)
        if group_of(key) is not None:
            continue
        if chunk is None:
            whole[key] = content
        else:
            found.setdefault(chunk[0], []).append((chunk[1], content))
    for section in CHUNKED:
        if section not in whole and (section in found or whole):
            inner = [content[1:-1] for _, content in sorted(found.get(section, [])) if content != b"[]"]
            whole[section] = b"[" + b",".join(inner) + b"]"
    return whole


# --- What each kind of change touches -----------------------------------------------------------
# A service says what changed (`quests.services.snapshots.state_changed(mission, change)`); the
# sections named here are refreshed from their tables, and only they. The ledger's changes are
# applied by chunk by the operation service itself (`savestate.ledger_changed`), in its round trip.

RECORD_SECTIONS = {
    "decision": "decisions",
    "open_question": "open_questions",
    "blocker": "blockers",
    "dependency": "dependencies",
    "evidence": "evidence",
    "note": "notes",
    "tool_output": "tool_outputs",
}
# Every section a service keeps current; `mission` and `archive` are made from the mission row.
KEPT = ("constraints", *RECORD_SECTIONS.values(), "milestones", "approvals", "operations")

CHANGES: dict[str, tuple[str, ...]] = {
    **{f"record.{kind}": (section,) for kind, section in RECORD_SECTIONS.items()},
    # A record that resolves another may resolve one of any kind.
    "record.resolving": tuple(RECORD_SECTIONS.values()),
    **{f"operation.{event}": ("operations",) for event in ("planned", "attempted", "completed", "failed", "observed")},
    "constraint.added": ("constraints",),
    "constraint.retired": ("constraints",),
    # Asked, decided (a standing decision decides the pending ones of its action too), undone, expired.
    "approval": ("approvals",),
    "milestone.claimed": ("milestones",),
    "milestone.reviewed": ("milestones",),
    # Cancel or completion: pending approvals expire, pending milestones are withdrawn.
    "pending.ended": ("approvals", "milestones"),
    # Pause, unpause: the mission row only, which the `mission` section is made from.
    "mission.status": (),
    # A restore sets records aside and brings pending items to an end: everything is read again.
    "restore": KEPT,
}


def touched(change: str) -> tuple[str, ...]:
    """The sections a kind of change touches (a KeyError names an undeclared change)."""
    return CHANGES[change]
