"""The engine's named operations on a run: who calls (`Caller`, `Credentials`, and a `Count` its
authentication takes along), the idempotency `Key`, the lock of a run's mission, the heartbeat, a record, the save state after a change, and a
run's start. Each is one round trip on PostgreSQL; the caller holds Django's transaction
(`transaction.atomic`). The agent's checkpoint is `quests.engine.checkpoints`."""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from checkpoints import refmaps
from checkpoints.pruning import BLOB_GC_LOCK
from quests.engine import runner
from quests.engine.sql import compact, lifecycle as lifecycle_sql, runs as runs_sql
from quests.models import Mission, Run

RUN_WIDTH = len(Run._meta.concrete_fields)
MISSION_WIDTH = len(Mission._meta.concrete_fields)
# A locked run's row: the run, its mission, the head's five columns (runs_sql.HEAD_SEEN_COLUMNS)
# and the key's earlier answer (two); what a statement reads after them starts here.
LOCKED_WIDTH = RUN_WIDTH + MISSION_WIDTH + 7


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


@dataclass(frozen=True)
class HeadAgent:
    """The head's agent state as a run's lock read it: its refs, their size and how they are stored
    (what a system checkpoint carries over without reading the head again)."""

    refs: dict[str, str]
    size: int
    layout: refmaps.AgentLayout


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
    head_seen_size: int = 0

    def _head_is_current(self) -> bool:
        """Whether the head read with the lock is still the head (the locked row says so; a
        checkpoint written since moved it)."""
        return self.head_seen_id is not None and self.head_seen_id == self.mission.head_checkpoint_id

    def head_agent(self) -> HeadAgent | None:
        """The head's agent state as read with the lock, while it is still the head."""
        if not self._head_is_current() or self.head_seen_layout is None:
            return None
        return HeadAgent(refs=dict(self.head_seen_parts), size=self.head_seen_size, layout=self.head_seen_layout)

    def head_layout(self) -> refmaps.AgentLayout | None:
        """How the head's agent refs are stored, while the head read with the lock is the head."""
        return self.head_seen_layout if self._head_is_current() else None

    def head_parts(self) -> set[str]:
        """The blobs the head's agent state refers to, while the head read with the lock is the
        head: they exist, and cannot be collected while it is."""
        return set(self.head_seen_parts.values()) if self._head_is_current() else set()

    def head_written(self, checkpoint_id: int, refs: dict[str, str], layout: refmaps.AgentLayout, size: int) -> None:
        """This process wrote the head since: what the lock read of it is now that checkpoint's
        (its agent-state refs, how they are stored, their size), and the key's earlier answer is
        spent."""
        self.head_seen_id, self.head_seen_parts, self.head_seen_size = checkpoint_id, dict(refs), size
        self.head_seen_layout = refmaps.AgentLayout(base=layout.base, delta=dict(layout.delta), refs=dict(refs))
        self.replay = (None, None)


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
    return locked_from_row(rows[0]) if rows else None


@dataclass(frozen=True)
class Credentials:
    """An agent token as its bearer sent it, by its hash: the engine's first statement authenticates it."""

    token_hash: str


@dataclass
class Count:
    """A count a statement takes along in its own round trip (a throttle's, in the database's
    cache): `upsert(row)` is the cache's upsert of the row the statement gives, `params` its
    parameters; once run, `value` is the count (None: the caller was not valid, nothing counted)."""

    upsert: Callable[[str], str]
    params: dict[str, Any]
    value: int | None = None

    def fetch(self, template: str, row: str, params: dict[str, Any]) -> list[tuple]:
        """`template` run with the upsert in place of `{count}` (the same text on every call, so
        prepared once): its rows without their last column, the count, which is kept in `value`."""
        rows = runner.fetch(_counted_statement(template, self.upsert(row)), {**params, **self.params})
        if not rows:
            return []
        *columns, counted = rows[0]
        self.value = int(counted) if counted is not None else None
        return [tuple(columns)]


@cache
def _counted_statement(template: str, upsert: str) -> str:
    # Compacted with the upsert in it: the whole text is what psycopg's 4,096 bytes count.
    return compact(template.replace("{count}", upsert))


def locked_from_row(row: Sequence[Any]) -> Locked:
    """The run, its mission, the head's parts and the key's earlier answer, from a row that holds
    them in that order (`runs_sql.LOCK_RUN_PG`, and `checkpoints_sql.CHECKPOINT_READ_PG` after who called)."""
    run = runner.model_from_row(Run, row[:RUN_WIDTH])
    mission = runner.model_from_row(Mission, row[RUN_WIDTH : RUN_WIDTH + MISSION_WIDTH])
    head_id, head_parts, head_base, head_delta, head_size, replay_id, replay_hash = row[RUN_WIDTH + MISSION_WIDTH : LOCKED_WIDTH]
    run.mission = mission
    parts = runner.json_value(head_parts) or {}
    return Locked(
        run=run,
        mission=mission,
        replay=(replay_id, replay_hash),
        head_seen_id=head_id,
        head_seen_parts=parts,
        head_seen_layout=refmaps.AgentLayout(base=head_base, delta=runner.json_value(head_delta) or {}, refs=parts) if head_id else None,
        head_seen_size=head_size or 0,
    )


def heartbeat(caller: Caller, run_id: int) -> tuple[Run | None, bool]:
    """Beat the run if it is still going: (the run, or None if the caller cannot see it; whether it beat)."""
    params = {**caller.params(), "run_id": run_id, "now": runner.now()}
    if runner.is_postgresql():
        rows = runner.fetch(runs_sql.HEARTBEAT_PG, params)
        if not rows:
            return None, False
        run, beaten = runner.model_from_row(Run, rows[0][:RUN_WIDTH]), rows[0][RUN_WIDTH]
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


@dataclass(frozen=True)
class RecordWritten:
    id: int
    resolved_found: bool  # whether the record it resolves was found
    created_at: datetime
    # PostgreSQL, for a record that resolves none: the window of its section before it (rows as
    # `section_reads.section_rows` reads them, newest first), and its data as stored. Else None.
    window_before: list[dict[str, Any]] | None = None
    data: Any = None


def record_write(row: RecordRow, *, window: int | None = None, unarchived_only: bool = False) -> RecordWritten:
    """Beat the run, store the raw output's blob, mark the resolved record and insert the record.
    On PostgreSQL, for a record that resolves none, the same statement reads the newest `window`
    live records of its kind (None: all), only unarchived ones if `unarchived_only`."""
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
        with_section = row.resolves is None
        params.update(window=window, unarchived_only=unarchived_only, with_section=with_section)
        ((record_id, resolved, data, before),) = runner.fetch(runs_sql.RECORD_WRITE_PG, params)
        if not with_section:
            return RecordWritten(record_id, resolved > 0, now)
        return RecordWritten(record_id, resolved > 0, now, window_before=json.loads(before), data=None if data is None else json.loads(data))
    beat, blob, resolves, insert = runs_sql.RECORD_WRITE_SQLITE
    *_, (_, resolved), ((made,), _) = runner.steps([(beat, params), (blob, params), (resolves, params), (insert, params)])
    return RecordWritten(made[0], resolved > 0, now)


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
    rows = runner.fetch(lifecycle_sql.LOCK_MISSION_PG if runner.is_postgresql() else lifecycle_sql.LOCK_MISSION_SQLITE, params)
    if not rows:
        return None
    return runner.model_from_row(Mission, rows[0][:MISSION_WIDTH]), (rows[0][MISSION_WIDTH], rows[0][MISSION_WIDTH + 1])


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
            lifecycle_sql.RUN_START_PG,
            {
                **params,
                **runner.audit_event_arrays(events),
            },
        )
        return run_id
    insert, moved, audited, remember = lifecycle_sql.RUN_START_SQLITE
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
