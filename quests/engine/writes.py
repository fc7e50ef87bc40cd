# Over 400 lines: the run's named writes share Caller, Key and Locked and the checkpoint read/write pair; the checkpoint pair moves to quests/engine/checkpoints.py next (it was merged from two branches this stop).
"""The engine's named operations on a run and its checkpoints. Each is one round trip on
PostgreSQL; the caller holds Django's transaction (`transaction.atomic`)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoints import refmaps
from checkpoints.pruning import BLOB_GC_LOCK
from quests.engine import runner
from quests.engine.sql import runs as runs_sql
from quests.models import AgentToken, Mission, Run

_RUN_WIDTH = len(Run._meta.concrete_fields)
_MISSION_WIDTH = len(Mission._meta.concrete_fields)


@dataclass(frozen=True)
class Caller:
    """Whose missions a statement may touch: the user's, and only its token's mission when the
    token is limited to one."""

    user_id: int
    token_mission_id: int | None = None

    def params(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "token_mission_id": self.token_mission_id}


@dataclass(frozen=True)
class Key:
    """An idempotency key of a write on a mission: `suffix` names the kind of object it makes
    (`checkpoints`, `records`, `runs`, …); `request_hash` is its body's."""

    suffix: str
    key: str | None
    request_hash: str = ""


@dataclass
class Locked:
    """What `lock_run` read: the run, its mission (locked), the key's earlier answer, and the
    head checkpoint's agent-state refs as read with the lock."""

    run: Run
    mission: Mission
    replay: tuple[int | None, str | None] = (None, None)
    head_seen_id: int | None = None
    head_seen_parts: dict[str, str] = field(default_factory=dict)
    head_seen_layout: refmaps.AgentLayout | None = None

    def head_layout(self) -> refmaps.AgentLayout | None:
        """How the head's agent refs are stored, if the head read with the lock is still the head."""
        if self.head_seen_id is None or self.head_seen_id != self.mission.head_checkpoint_id:
            return None
        return self.head_seen_layout

    def head_parts(self) -> set[str]:
        """The blobs the head's agent state refers to, if the head read with the lock is still
        the head (the locked row says so): they exist, and cannot be collected while it is."""
        if self.head_seen_id is None or self.head_seen_id != self.mission.head_checkpoint_id:
            return set()
        return set(self.head_seen_parts.values())


def lock_run(caller: Caller, run_id: int, key: Key | None = None) -> Locked | None:
    """The run and its mission with the mission's row locked; None when the caller cannot see it."""
    params = {
        **caller.params(),
        "run_id": run_id,
        "key": key.key if key else None,
        "key_suffix": key.suffix if key else "",
        "blob_gc_lock": BLOB_GC_LOCK,
    }
    rows = runner.fetch(runs_sql.LOCK_RUN_PG if runner.is_postgresql() else runs_sql.LOCK_RUN_SQLITE, params)
    return _locked(rows[0]) if rows else None


@dataclass(frozen=True)
class Credentials:
    """An agent token as its bearer sent it, by its hash: the engine's first statement authenticates it."""

    token_hash: str


@dataclass(frozen=True)
class Claim:
    """What the agent checkpoint's fast path read without a lock, for its write's compare-and-set:
    the mission row's fingerprint as read and the id the checkpoint gets (and the token whose last
    use the write notes, if due)."""

    mission_seen: str
    checkpoint_id: int
    used_token_id: int | None = None


@dataclass
class Seen:
    """What `checkpoint_read` read: who called, and (when the caller may see the run) the same as
    `lock_run` reads, without the lock, with the `claim` for the write (PostgreSQL only)."""

    caller: Caller
    token_id: int | None
    token_last_used_at: datetime | None
    locked: Locked | None
    claim: Claim | None


def checkpoint_read(who: Caller | Credentials, run_id: int, key: Key) -> Seen | None:
    """Round trip 1 of the agent's checkpoint: authenticate, read the run, its mission, the head's
    parts and the key's earlier answer, and allocate the checkpoint's id; None when the token is
    not valid."""
    credentials = who if isinstance(who, Credentials) else None
    caller = who if isinstance(who, Caller) else Caller(user_id=0)
    params = {
        "token_hash": credentials.token_hash if credentials else None,
        "user_id": caller.user_id,
        "token_mission_id": caller.token_mission_id,
        "run_id": run_id,
        "key": key.key,
        "key_suffix": key.suffix,
    }
    rows = runner.fetch(runs_sql.CHECKPOINT_READ_PG if runner.is_postgresql() else runs_sql.CHECKPOINT_READ_SQLITE, params)
    if not rows:
        return None
    (user_id, token_id, token_mission_id, last_used_at), row = rows[0][:4], rows[0][4:]
    seen = Seen(
        caller=Caller(user_id=user_id, token_mission_id=token_mission_id),
        token_id=token_id,
        token_last_used_at=runner.field_value(AgentToken, "last_used_at", last_used_at),
        locked=None,
        claim=None,
    )
    if row[0] is None:
        return seen
    seen.locked = _locked(row)
    mission_seen, checkpoint_id = row[_RUN_WIDTH + _MISSION_WIDTH + 6 :]
    if checkpoint_id is not None:
        seen.claim = Claim(mission_seen=mission_seen, checkpoint_id=checkpoint_id)
    return seen


def _locked(row: Sequence[Any]) -> Locked:
    """The run, its mission, the head's parts and the key's earlier answer, from a row that holds
    them in that order (`runs_sql.LOCK_RUN_PG`, `runs_sql.CHECKPOINT_READ_PG`)."""
    run = runner.model_from_row(Run, row[:_RUN_WIDTH])
    mission = runner.model_from_row(Mission, row[_RUN_WIDTH : _RUN_WIDTH + _MISSION_WIDTH])
    head_id, head_parts, head_base, head_delta, replay_id, replay_hash = row[_RUN_WIDTH + _MISSION_WIDTH : _RUN_WIDTH + _MISSION_WIDTH + 6]
    run.mission = mission
    parts = runner.json_value(head_parts) or {}
    return Locked(
        run=run,
        mission=mission,
        replay=(replay_id, replay_hash),
        head_seen_id=head_id,
        head_seen_parts=parts,
        head_seen_layout=refmaps.AgentLayout(base=head_base, delta=runner.json_value(head_delta) or {}, refs=parts) if head_id else None,
    )


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
        "compaction_report": runner.json_text(row.compaction_report),
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
    maps = {params["state_map_id"]: row.state_refs, **row.agent_layout.new_maps}
    if runner.is_postgresql():
        shas = list(contents)
        claimed = (
            {"blob_gc_lock": BLOB_GC_LOCK, "checkpoint_id": claim.checkpoint_id, "mission_seen": claim.mission_seen, "used_token_id": claim.used_token_id}
            if claim
            else {}
        )
        rows = runner.fetch(
            runs_sql.CHECKPOINT_CLAIMED_WRITE_PG if claim else runs_sql.CHECKPOINT_WRITE_PG,
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


def heartbeat(caller: Caller, run_id: int) -> tuple[Run | None, bool]:
    """Beat the run if it is still going: (the run, or None if the caller cannot see it; whether it beat)."""
    params = {**caller.params(), "run_id": run_id, "now": runner.now()}
    if runner.is_postgresql():
        rows = runner.fetch(runs_sql.HEARTBEAT_PG, params)
        if not rows:
            return None, False
        run, beaten = runner.model_from_row(Run, rows[0][:_RUN_WIDTH]), rows[0][_RUN_WIDTH]
    else:
        (_, count), (rows, _) = runner.steps([(runs_sql.HEARTBEAT_SQLITE[0], params), (runs_sql.HEARTBEAT_SQLITE[1], params)])
        if not rows:
            return None, False
        run, beaten = runner.model_from_row(Run, rows[0]), count > 0
    if beaten:
        run.heartbeat_at = params["now"]
    return run, bool(beaten)


@dataclass(frozen=True)
class RecordRow:
    mission_id: int
    run_id: int
    kind: str
    text: str
    data: Any
    size_bytes: int
    resolves: int | None
    archived: bool = False
    blob: tuple[str, bytes] | None = None  # (sha256, content) of a raw output archived as a blob


def record_write(row: RecordRow) -> tuple[int, bool, datetime]:
    """Beat the run, store the raw output's blob, mark the resolved record and insert the record:
    (the new record's id, whether the record it resolves was found, when it was made)."""
    blob_id, blob_data = row.blob or (None, None)
    now = runner.now()
    params = {
        "now": now,
        "run_id": row.run_id,
        "mission_id": row.mission_id,
        "kind": row.kind,
        "text": row.text,
        "data": None if row.data is None else runner.json_text(row.data),
        "blob_id": blob_id,
        "blob_data": blob_data,
        "blob_size": len(blob_data) if blob_data is not None else 0,
        "size_bytes": row.size_bytes,
        "resolves": row.resolves,
        "archived": row.archived,
    }
    if runner.is_postgresql():
        ((record_id, resolved),) = runner.fetch(runs_sql.RECORD_WRITE_PG, params)
        return record_id, resolved > 0, now
    beat, blob, resolves, insert = runs_sql.RECORD_WRITE_SQLITE
    *_, (_, resolved), ((made,), _) = runner.steps([(beat, params), (blob, params), (resolves, params), (insert, params)])
    return made[0], resolved > 0, now


@dataclass(frozen=True)
class StateSave:
    """The mission's current document after a change, and what goes with saving it."""

    mission_id: int
    state_version: int
    state_refs: dict[str, str]
    state_pending: dict[str, str]
    state_report: dict[str, Any]
    snapshot_not_before: datetime
    key: Key | None = None
    key_owner_id: int | None = None
    object_id: int | None = None  # what the key made
    resolves: int | None = None  # a record that `object_id` (a record) resolves
    parts: dict[str, bytes] = field(default_factory=dict)  # {sha256: content} of parts no row holds yet


def state_save(save: StateSave) -> int | None:
    """Save the document (storing the `parts` it refers to that no row holds yet), remember the
    key, close the loop of a resolution, and ask for a background snapshot: the new snapshot
    request's id, or None when one was pending already."""
    key = save.key
    params = {
        "now": runner.now(),
        "mission_id": save.mission_id,
        "state_version": save.state_version,
        "state_refs": runner.json_text(save.state_refs),
        "state_pending": runner.json_text(save.state_pending),
        "state_report": runner.json_text(save.state_report),
        "not_before": save.snapshot_not_before,
        "key": key.key if key else None,
        "key_scope": f"m{save.mission_id}:{key.suffix}" if key else "",
        "request_hash": key.request_hash if key else "",
        "key_owner_id": save.key_owner_id,
        "object_id": save.object_id,
        "resolves": save.resolves,
        "resolved_by": save.object_id,
    }
    if runner.is_postgresql():
        shas = list(save.parts)
        rows = runner.fetch(runs_sql.STATE_SAVE_PG, {**params, "part_shas": shas, "part_data": [save.parts[s] for s in shas]})
    else:
        resolver, remember, store, saved, ask = runs_sql.STATE_SAVE_SQLITE
        chosen = ([(resolver, params)] if save.resolves is not None else []) + ([(remember, params)] if params["key"] else [])
        chosen += [(store, {**params, "sha": sha, "data": data}) for sha, data in save.parts.items()]
        rows = runner.steps([*chosen, (saved, params), (ask, params)])[-1][0]
    return rows[0][0] if rows else None


def lock_mission(caller: Caller, mission_id: int, key: Key | None = None) -> tuple[Mission, tuple[int | None, str | None]] | None:
    """The mission locked, with what `key` already made; None when the caller cannot see it."""
    params = {**caller.params(), "mission_id": mission_id, "key": key.key if key else None, "key_suffix": key.suffix if key else ""}
    rows = runner.fetch(runs_sql.LOCK_MISSION_PG if runner.is_postgresql() else runs_sql.LOCK_MISSION_SQLITE, params)
    if not rows:
        return None
    return runner.model_from_row(Mission, rows[0][:_MISSION_WIDTH]), (rows[0][_MISSION_WIDTH], rows[0][_MISSION_WIDTH + 1])


def run_start(run: Run, mission: Mission, events: list[Any], key: Key | None) -> int:
    """Insert `run`, move its mission (status, run count, active run, state version), write the
    audit `events` (unsaved AuditEvents; one without an entity id is the new run's) and remember
    the key: one statement on PostgreSQL. Returns the run's id."""
    first = events[0]
    params = {
        "now": run.started_at,
        "mission_id": mission.pk,
        "number": run.number,
        "agent": run.agent,
        "token_id": run.token_id,
        "status": mission.status,
        "state_version": mission.state_version,
        "actor_user_id": first.actor_user_id,
        "actor_token_id": first.actor_token_id,
        "actor": first.actor,
        "key": key.key if key else None,
        "key_scope": f"m{mission.pk}:{key.suffix}" if key else "",
        "request_hash": key.request_hash if key else "",
        "key_owner_id": mission.owner_id,
    }
    if runner.is_postgresql():
        ((run_id,),) = runner.fetch(
            runs_sql.RUN_START_PG,
            {
                **params,
                **runner.audit_event_arrays(events),
            },
        )
        return run_id
    insert, moved, audited, remember = runs_sql.RUN_START_SQLITE
    (((made,), _),) = runner.steps([(insert, params)])
    after = {**params, "run_id": made[0]}
    runner.steps(
        [(moved, after)]
        + [
            (
                audited,
                {
                    **after,
                    "entity": e.entity,
                    "entity_id": e.entity_id,
                    "action": e.action,
                    "from_state": e.from_state,
                    "to_state": e.to_state,
                    "data": runner.json_text(e.data),
                },
            )
            for e in events
        ]
        + ([(remember, after)] if after["key"] else [])
    )
    return made[0]
