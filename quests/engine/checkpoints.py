"""The agent's checkpoint as the engine writes it: `checkpoint_read` (round trip 1 of the fast path:
authenticate, read, allocate the id, without a lock) and `checkpoint_write` (the checkpoint's one
statement: under the mission's row lock, or as the fast path's compare-and-set on the mission row
as read). The caller holds Django's transaction for the locked form; the fast path runs each
statement in autocommit."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checkpoints import refmaps
from checkpoints.pruning import BLOB_GC_LOCK
from quests.engine import runner
from quests.engine.sql import runs as runs_sql, tokens as tokens_sql
from quests.engine.writes import MISSION_WIDTH, RUN_WIDTH, Caller, Count, Credentials, Key, Locked, locked_from_row
from quests.models import AgentToken


@dataclass(frozen=True)
class Claim:
    """What the agent checkpoint's fast path read without a lock, for its write's compare-and-set:
    the mission row's fingerprint as read and the id the checkpoint gets (and the token whose last
    use the write notes, if due)."""

    mission_seen: str
    checkpoint_id: int
    used_token_id: int | None = None
    # A row written with the checkpoint, in its statement: the claimed write that also writes it
    # (`CHECKPOINT_CLAIMED_WRITE_PG` with more) and the row's parameters (QuestlogSaver.put's row).
    also: tuple[str, dict[str, Any]] | None = None


@dataclass
class Seen:
    """What `checkpoint_read` read: who called, and (when the caller may see the run) the same as
    `lock_run` reads, without the lock, with the `claim` for the write (PostgreSQL only)."""

    caller: Caller
    token_id: int | None
    token_last_used_at: datetime | None
    locked: Locked | None
    claim: Claim | None

    @classmethod
    def known(cls, caller: Caller) -> "Seen":
        """A caller authenticated before the statement (no token of its own to record)."""
        return cls(caller=caller, token_id=None, token_last_used_at=None, locked=None, claim=None)


def checkpoint_read(who: Caller | Credentials, run_id: int, key: Key, count: Count | None = None) -> Seen | None:
    """Round trip 1 of the agent's checkpoint: authenticate, read the run, its mission, the head's
    parts and the key's earlier answer, and allocate the checkpoint's id; None when the token is
    not valid. With `count` (PostgreSQL) it also counts the request of a valid token (`count.value`)."""
    statement = runs_sql.CHECKPOINT_READ_PG if runner.is_postgresql() else runs_sql.CHECKPOINT_READ_SQLITE
    read = as_who(who, statement, runs_sql.CHECKPOINT_READ_COUNTED_PG, {"run_id": run_id, "key": key.key, "key_suffix": key.suffix}, count)
    if read is None:
        return None
    seen, row = read
    if row[0] is None:
        return seen
    seen.locked = locked_from_row(row)
    mission_seen, checkpoint_id = row[RUN_WIDTH + MISSION_WIDTH + 6 :]
    if checkpoint_id is not None:
        seen.claim = Claim(mission_seen=mission_seen, checkpoint_id=checkpoint_id)
    return seen


def as_who(who: Caller | Credentials, statement: str, counted: str, params: dict[str, Any], count: Count | None) -> tuple[Seen, tuple] | None:
    """Run a statement that starts with who is calling (`tokens_sql.CALLER`: an agent token by its
    hash, or a caller already known), or with `count` its `counted` form (`tokens_sql.counted_pg`,
    the count kept in `count.value`): who called and the rest of its row, or None when the
    token is not valid."""
    caller = who if isinstance(who, Caller) else Caller(user_id=0)
    params = {"token_hash": who.token_hash if isinstance(who, Credentials) else None, **caller.params(), **params}
    rows = count.fetch(counted, tokens_sql.COUNTED_CALLER_ROW_PG, params) if count is not None else runner.fetch(statement, params)
    return _seen_caller(rows[0]) if rows else None


def _seen_caller(row: tuple) -> tuple[Seen, tuple]:
    user_id, token_id, token_mission_id, last_used_at = row[:4]
    seen = Seen(
        caller=Caller(user_id=user_id, token_mission_id=token_mission_id),
        token_id=token_id,
        token_last_used_at=runner.field_value(AgentToken, "last_used_at", last_used_at),
        locked=None,
        claim=None,
    )
    return seen, row[4:]


@dataclass
class CheckpointRow:
    """Everything a checkpoint's write needs, computed by the save state before it writes."""

    mission_id: int
    run_id: int | None
    parent_id: int | None
    seq: int
    trigger: str
    hash: str
    note: str
    state_refs: dict[str, str]
    agent_layout: refmaps.AgentLayout  # the agent state's refs as a delta on a shared base
    record_watermark: int
    size_bytes: int
    agent_state_bytes: int
    compaction_report: dict[str, Any]
    blobs: dict[str, bytes]  # {sha256: content} that may be new
    archived_blobs: dict[str, bytes]  # notes a compaction pass archives (text/plain; not counted as new state)
    archived_previews: dict[int, tuple[str, str, int]]  # record id -> (blob, preview, size)
    mission_state_refs: dict[str, str]
    mission_state_report: dict[str, Any]


@dataclass(frozen=True)
class Written:
    id: int
    new_bytes: int
    created_at: datetime


def checkpoint_write(
    row: CheckpointRow, *, beat_run_id: int | None = None, key: Key | None = None, key_owner_id: int | None = None, claim: Claim | None = None
) -> Written | None:
    """Store the checkpoint's new blobs and its row, remember the key that made it, beat the run,
    and move the mission's head to it: one statement on PostgreSQL. With a `claim` (PostgreSQL,
    in autocommit, no lock held) only if the mission row is still the one read: None when it
    moved, and nothing is written."""
    now = runner.now()
    params: dict[str, Any] = {
        "now": now,
        "beat_run_id": beat_run_id,
        "mission_id": row.mission_id,
        "run_id": row.run_id,
        "parent_id": row.parent_id,
        "seq": row.seq,
        "trigger": row.trigger,
        "hash": row.hash,
        "note": row.note,
        "state_map_id": refmaps.map_sha(row.state_refs),
        "agent_map_id": row.agent_layout.base,
        "agent_delta": runner.json_text(row.agent_layout.delta),
        "record_watermark": row.record_watermark,
        "size_bytes": row.size_bytes,
        "agent_state_bytes": row.agent_state_bytes,
        "report_id": refmaps.map_sha(row.compaction_report) if row.compaction_report else None,
        "mission_state_refs": runner.json_text(row.mission_state_refs),
        "mission_state_report": runner.json_text(row.mission_state_report),
        "key": key.key if key else None,
        "key_scope": f"m{row.mission_id}:{key.suffix}" if key else "",
        "request_hash": key.request_hash if key else "",
        "key_owner_id": key_owner_id,
    }
    archived = {sha: data for sha, data in row.archived_blobs.items() if sha not in row.blobs}
    media = {**{sha: "application/json" for sha in row.blobs}, **{sha: "text/plain" for sha in archived}}
    contents = {**row.blobs, **archived}
    previews = row.archived_previews
    maps: dict[str, dict[str, Any]] = {params["state_map_id"]: row.state_refs, **row.agent_layout.new_maps}
    if params["report_id"]:  # the compaction report is a shared map too
        maps[params["report_id"]] = row.compaction_report
    if runner.is_postgresql():
        shas = list(contents)
        claimed = (
            {"blob_gc_lock": BLOB_GC_LOCK, "checkpoint_id": claim.checkpoint_id, "mission_seen": claim.mission_seen, "used_token_id": claim.used_token_id}
            if claim
            else {}
        )
        statement = runs_sql.CHECKPOINT_CLAIMED_WRITE_PG if claim else runs_sql.CHECKPOINT_WRITE_PG
        if claim and claim.also:
            statement, also = claim.also
            claimed.update(also)
        rows = runner.fetch(
            statement,
            {
                **params,
                **claimed,
                "blob_shas": shas,
                "blob_data": [contents[s] for s in shas],
                "blob_media": [media[s] for s in shas],
                "counted": list(row.blobs),
                "map_shas": list(maps),
                "map_refs": [runner.json_text(refs) for refs in maps.values()],
                "archived_ids": list(previews),
                "archived_blobs": [p[0] for p in previews.values()],
                "archived_previews": [p[1] for p in previews.values()],
                "archived_sizes": [p[2] for p in previews.values()],
            },
        )
        if not rows:
            return None
        ((made_id, new_bytes),) = rows
        return Written(id=made_id, new_bytes=new_bytes, created_at=now)
    if claim is not None:
        raise ValueError("SQLite writes a checkpoint under its database lock: no claim.")
    beat, blob, store_map, archive, insert, remember, move = runs_sql.CHECKPOINT_WRITE_SQLITE
    stored = runner.steps(
        [(beat, params)]
        + [(blob, {**params, "sha": sha, "data": data, "media_type": media[sha]}) for sha, data in contents.items()]
        + [(store_map, {"sha": sha, "refs": runner.json_text(refs)}) for sha, refs in maps.items()]
        + [(archive, {"id": pk, "blob_id": b, "preview": p, "size_bytes": n}) for pk, (b, p, n) in previews.items()]
    )
    new_bytes = sum(len(data) for (_, count), (sha, data) in zip(stored[1:], contents.items()) if count > 0 and sha in row.blobs)
    (((made,), _),) = runner.steps([(insert, {**params, "new_bytes": new_bytes})])
    after = {**params, "checkpoint_id": made[0]}
    runner.steps(([(remember, after)] if params["key"] else []) + [(move, after)])
    return Written(id=made[0], new_bytes=made[1], created_at=now)
