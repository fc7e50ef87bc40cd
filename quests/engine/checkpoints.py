"""The agent's checkpoint as the engine writes it: `checkpoint_read` (round trip 1 of the fast path:
authenticate, read, allocate the id, without a lock) and `checkpoint_write` (the checkpoint's one
statement: under the mission's row lock, as the fast path's compare-and-set on the mission row as
read, or, when this process wrote the run's last checkpoint (`Known`), as the one round trip that
also authenticates). The caller holds Django's transaction for the locked form; the fast paths run
each statement in autocommit."""

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from checkpoints import refmaps
from checkpoints.pruning import BLOB_GC_LOCK
from quests.engine import runner
from quests.engine.sql import checkpoints as checkpoints_sql, runs as runs_sql, tokens as tokens_sql
from quests.engine.writes import LOCKED_WIDTH, RUN_WIDTH, Caller, Count, Credentials, Key, Locked, heartbeat, lock_run, locked_from_row
from quests.models import AgentToken, Run


@dataclass(frozen=True)
class Claim:
    """What the agent checkpoint's fast path read without a lock, for its write's compare-and-set:
    the mission row's fingerprint as read and the id the checkpoint gets (and the token whose last
    use the write notes, if due)."""

    mission_seen: str
    checkpoint_id: int | None  # None: the one-trip write (`who` given) allocates it
    used_token_id: int | None = None
    # A row written with the checkpoint, in its statement: the claimed write that also writes it
    # (`CHECKPOINT_CLAIMED_WRITE_PG` with more; with `who`, `CHECKPOINT_KNOWN_WRITE_PG` with more,
    # and `also_counted` its counted form) and the row's parameters (QuestlogSaver.put's row).
    also: tuple[str, dict[str, Any]] | None = None
    also_counted: str | None = None
    # The one-trip write (`CHECKPOINT_KNOWN_WRITE_PG`): who calls, authenticated by the write
    # itself, and the count it takes along (it claims only within `rate`).
    who: "Caller | Credentials | None" = None
    count: Count | None = None
    rate: int = 0


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
    statement = checkpoints_sql.CHECKPOINT_READ_PG if runner.is_postgresql() else checkpoints_sql.CHECKPOINT_READ_SQLITE
    read = as_who(who, statement, checkpoints_sql.CHECKPOINT_READ_COUNTED_PG, {"run_id": run_id, "key": key.key, "key_suffix": key.suffix}, count)
    if read is None:
        return None
    seen, row = read
    if row[0] is None:
        return seen
    seen.locked = locked_from_row(row)
    mission_seen, checkpoint_id = row[LOCKED_WIDTH:]
    if checkpoint_id is not None:
        seen.claim = Claim(mission_seen=mission_seen, checkpoint_id=checkpoint_id)
    return seen


def run_locked_as(who: Caller | Credentials, run_id: int, key: Key | None, count: Count | None = None) -> "LockedFor[Locked] | None":
    """`writes.lock_run` for a caller the same statement authenticates (`locked_as`)."""
    params = {"run_id": run_id, "key": key.key if key else None, "key_suffix": key.suffix if key else ""}
    return locked_as(
        who,
        (runs_sql.LOCK_RUN_AS_WHO_PG, runs_sql.LOCK_RUN_AS_WHO_COUNTED_PG),
        params,
        count,
        lock=lambda caller: lock_run(caller, run_id, key),
        read=locked_from_row,
    )


def heartbeat_as(who: Caller | Credentials, run_id: int, count: Count | None = None) -> tuple[Seen, Run | None, bool] | None:
    """`writes.heartbeat` for a caller the same statement authenticates (on PostgreSQL): who
    called, the run (None when the caller may not see it) and whether it beat; None when the token
    is not valid. With `count` it also counts the request of a valid token (`count.value`)."""
    if not runner.is_postgresql():
        read = as_who(who, tokens_sql.WHO_NAMED, "", {}, None)  # who called, then the beat as given
        if read is None:
            return None
        seen = read[0]
        return (seen, *heartbeat(seen.caller, run_id))
    now = runner.now()
    read = as_who(who, runs_sql.HEARTBEAT_AS_WHO_PG, runs_sql.HEARTBEAT_AS_WHO_COUNTED_PG, {"run_id": run_id, "now": now}, count)
    if read is None:
        return None
    seen, row = read
    if row[0] is None:
        return seen, None, False
    run, beaten = runner.model_from_row(Run, row[:RUN_WIDTH]), bool(row[RUN_WIDTH])
    if beaten:
        run.heartbeat_at = now
    return seen, run, beaten


def as_who(who: Caller | Credentials, statement: str, counted: str, params: dict[str, Any], count: Count | None) -> tuple[Seen, tuple] | None:
    """Run a statement that starts with who is calling (`tokens_sql.CALLER`: an agent token by its
    hash, or a caller already known), or with `count` its `counted` form (`tokens_sql.counted_pg`,
    the count kept in `count.value`): who called and the rest of its row, or None when the
    token is not valid."""
    params = {**_who_params(who), **params}
    rows = count.fetch(counted, tokens_sql.COUNTED_CALLER_ROW_PG, params) if count is not None else runner.fetch(statement, params)
    return _seen_caller(rows[0]) if rows else None


@dataclass
class LockedFor[T]:
    """A lock taken for a caller its own statement authenticated: who called (`seen`), the name and
    prefix of the agent token it called with (which its audit events name it by), and what the
    lock read (None: the caller may not see it)."""

    seen: Seen
    token_name: str | None
    token_prefix: str | None
    locked: T | None


def locked_as[T](
    who: Caller | Credentials,
    statements: tuple[str, str],
    params: dict[str, Any],
    count: Count | None,
    *,
    lock: Callable[[Caller], T | None],
    read: Callable[[Sequence[Any]], T],
    fresh_at: int | None = None,
) -> LockedFor[T] | None:
    """A lock (`lock`, for a caller known) taken for a caller its own statement authenticates: one
    round trip on PostgreSQL (`statements`: the lock as `tokens_sql.named_as_who` makes it, and its
    counted form), whose row `read` makes what the lock read. Where the row says whether it is
    fresh (`fresh_at`: the ledger's locks), a lock that waited for another writer is taken again
    for the caller now known; the request is counted once. SQLite reads who called first
    (`WHO_NAMED`), then locks. None when the token is not valid."""
    if not runner.is_postgresql():
        found = as_who(who, tokens_sql.WHO_NAMED, "", {}, None)
        if found is None:
            return None
        seen, (name, prefix) = found
        return LockedFor(seen=seen, token_name=name, token_prefix=prefix, locked=lock(seen.caller))
    found = as_who(who, *statements, {**params, "blob_gc_lock": BLOB_GC_LOCK}, count)
    if found is None:
        return None
    seen, rest = found
    *row, name, prefix = rest
    if row[0] is None:
        locked = None
    elif fresh_at is None or row[fresh_at]:
        locked = read(row)
    else:
        locked = lock(seen.caller)
    return LockedFor(seen=seen, token_name=name, token_prefix=prefix, locked=locked)


def _who_params(who: Caller | Credentials) -> dict[str, Any]:
    """The parameters `tokens_sql.CALLER` names who calls by."""
    caller = who if isinstance(who, Caller) else Caller(user_id=0)
    return {"token_hash": who.token_hash if isinstance(who, Credentials) else None, **caller.params()}


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
    mission_after: str | None = None  # the mission row's fingerprint after a claimed write
    more: tuple = ()  # the columns a write with more (`Claim.also`) answers after those


@dataclass
class Known:
    """A run's mission as this process's last write of the run's checkpoint left it: what the next
    checkpoint of the same caller would read (`seen`), and the mission row's fingerprint then.
    With it the next checkpoint is one round trip (`CHECKPOINT_KNOWN_WRITE_PG`), which claims the
    row only if it is still that one; when anything else moved it, nothing is written, and the
    checkpoint reads and writes as it would without."""

    seen: Seen
    mission_after: str

    @property
    def locked(self) -> Locked:
        """The run and its mission as the write left them (a `Known` is kept only with them)."""
        assert self.seen.locked is not None
        return self.seen.locked


# Kept per process, a few per agent at most; an entry is taken out while its checkpoint is
# written, so two requests of one run never share one. Bounded: the oldest go first. By mission
# too: a save of the mission's state in this process (a record, an operation) forgets its entries,
# so the checkpoint after it reads first instead of trying a claim bound to fail.
KNOWN_LIMIT = 2048
_known: OrderedDict[tuple, Known] = OrderedDict()
_known_missions: dict[int, set[tuple]] = {}
_known_lock = threading.Lock()


def _known_key(who: Caller | Credentials, where: Hashable) -> tuple:
    if isinstance(who, Credentials):
        return ("token", who.token_hash, where)
    return ("user", who.user_id, who.token_mission_id, where)


def known_take(who: Caller | Credentials, where: Hashable) -> Known | None:
    """The mission as this process last wrote it for this caller, taken out: where the run's
    checkpoint was written (`where`: the run's id; a LangGraph thread's save, its own key)."""
    with _known_lock:
        return _known_drop(_known_key(who, where))


def known_keep(who: Caller | Credentials, where: Hashable, known: Known) -> None:
    key = _known_key(who, where)
    with _known_lock:
        _known[key] = known
        _known_missions.setdefault(_known_mission(known), set()).add(key)
        while len(_known) > KNOWN_LIMIT:
            _known_drop(next(iter(_known)))


def known_moved(mission_id: int) -> None:
    """This process saved the mission's state: what it knew of the mission's row is stale."""
    with _known_lock:
        for key in _known_missions.get(mission_id, set()).copy():
            _known_drop(key)


def known_forget() -> None:
    """Forget every run this process wrote (tests that must see the two-trip path)."""
    with _known_lock:
        _known.clear()
        _known_missions.clear()


def _known_mission(known: Known) -> int:
    return known.locked.mission.pk


def _known_drop(key: tuple) -> Known | None:
    known = _known.pop(key, None)
    if known is not None:
        keys = _known_missions.get(_known_mission(known), set())
        keys.discard(key)
        if not keys:
            _known_missions.pop(_known_mission(known), None)
    return known


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
        statement = checkpoints_sql.CHECKPOINT_CLAIMED_WRITE_PG if claim else checkpoints_sql.CHECKPOINT_WRITE_PG
        counted = checkpoints_sql.CHECKPOINT_KNOWN_WRITE_COUNTED_PG
        if claim and claim.who is not None:
            # Its mission as this process's last write left it: that write cleared the report's
            # `archive_due`, and any archive due since moved the row, so no claim could hold.
            if previews:
                raise ValueError("The one-statement checkpoint carries no notes' archive.")
            statement = checkpoints_sql.CHECKPOINT_KNOWN_WRITE_PG
            claimed.update(_who_params(claim.who), key_suffix=key.suffix if key else "", rate=claim.rate)
        if claim and claim.also:
            statement, also = claim.also
            counted = claim.also_counted or counted
            claimed.update(also)
        sent = {
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
        }
        if claim and claim.who is not None and claim.count is not None:
            rows = claim.count.fetch(counted, checkpoints_sql.KNOWN_COUNTED_ROW_PG, sent)
        else:
            rows = runner.fetch(statement, sent)
        if not rows or rows[0][0] is None:
            return None
        made_id, new_bytes, mission_after, *more = rows[0]
        return Written(id=made_id, new_bytes=new_bytes, created_at=now, mission_after=mission_after, more=tuple(more))
    if claim is not None:
        raise ValueError("SQLite writes a checkpoint under its database lock: no claim.")
    beat, blob, store_map, archive, insert, remember, move = checkpoints_sql.CHECKPOINT_WRITE_SQLITE
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
