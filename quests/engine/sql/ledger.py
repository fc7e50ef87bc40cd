"""The operation ledger: the lock of an operation's mission (with the operation, its receipts and the
stored ledger chunk a change rewrites), and the write of a plan or a change."""

from quests.engine.sql.runs import ASK_SNAPSHOT, MISSION_COLUMNS, RUN_COLUMNS, SAVE_STATE, STORE_PART_SQLITE, STORE_PARTS_PG
from quests.engine.sql.tokens import GIVEN_CALLER, WHO_CALLER, counted_pg, named_as_who

# --- The operation ledger -------------------------------------------------------------------------------
# An operation's columns, in its model's field order.
OPERATION_COLUMNS = """
    o.id, o.created_at, o.retention_class, o.retention_approved_at, o.expires_at, o.mission_id, o.run_id, o.key,
    o.request_hash, o.kind, o.target, o.request, o.status, o.attempts, o.max_attempts, o.external_id,
    o.external_status, o.receipt, o.completion_hash, o.error, o.retryable, o.updated_at"""
# The ledger chunk a change rewrites, with its group (checkpoints.sections, format 3), as the
# current document stores them: the group that holds the operation `chunk_of` (the last whose
# first id is not past it; the mission's save-state report lists the groups' first ids), its map
# of chunk refs, and in it the chunk that holds the operation; for an operation about to be planned
# (`chunk_of` past every id) the last group and its last chunk. Each is returned as stored (first
# id and blob): the chunk's items are not read from their rows and dumped again, since every
# change keeps the chunk equal to them (tests/test_properties_savestate.py) and only the changed
# item is dumped (checkpoints.sections.ledger_change). Part names are `sections.group_key`'s and
# `sections.chunk_key`'s.
# PostgreSQL finds each once, in a lateral join (`lg`); SQLite, which has none, in nested
# subqueries of the columns (its statements have no parse cache to fit in).
_LEDGER_JOIN_PG = """
  LEFT JOIN LATERAL (
      SELECT g.f AS group_first, gb.data AS group_data, c.f AS chunk_first, cb.data AS chunk_data
        FROM (SELECT max(CAST(f AS bigint)) AS f FROM jsonb_array_elements_text(m.state_report -> 'ledger') AS f
               WHERE CAST(f AS bigint) <= %(chunk_of)s) g
        LEFT JOIN checkpoints_blob gb ON gb.sha256 = m.state_refs ->> ('operations#' || g.f)
        CROSS JOIN LATERAL (SELECT convert_from(gb.data, 'UTF8')::jsonb AS refs) gj
        CROSS JOIN LATERAL (SELECT max(CAST(split_part(k, '@', 2) AS bigint)) AS f FROM jsonb_object_keys(gj.refs) AS k
                             WHERE CAST(split_part(k, '@', 2) AS bigint) <= %(chunk_of)s) c
        LEFT JOIN checkpoints_blob cb ON cb.sha256 = gj.refs ->> ('operations@' || c.f)
  ) lg ON true"""
_LEDGER_CHUNK_PG = "lg.group_first AS ledger_group_first, lg.group_data AS ledger_group, lg.chunk_first AS ledger_first, lg.chunk_data AS ledger_chunk"
_GROUP_FIRST_SQLITE = "(SELECT max(CAST(value AS integer)) FROM json_each(m.state_report, '$.ledger') WHERE CAST(value AS integer) <= %(chunk_of)s)"
_GROUP_BLOB_SQLITE = f"""(SELECT b.data FROM checkpoints_blob b
         WHERE b.sha256 = json_extract(m.state_refs, '$."operations#' || {_GROUP_FIRST_SQLITE} || '"'))"""
_GROUP_SQLITE = f"CAST({_GROUP_BLOB_SQLITE} AS TEXT)"
_CHUNK_FIRST_SQLITE = f"""(SELECT max(CAST(substr(key, instr(key, '@') + 1) AS integer)) FROM json_each({_GROUP_SQLITE})
         WHERE CAST(substr(key, instr(key, '@') + 1) AS integer) <= %(chunk_of)s)"""
_LEDGER_CHUNK_SQLITE = f"""{_GROUP_FIRST_SQLITE} AS ledger_group_first, {_GROUP_BLOB_SQLITE} AS ledger_group, {_CHUNK_FIRST_SQLITE} AS ledger_first,
       (SELECT b.data FROM checkpoints_blob b
         WHERE b.sha256 = json_extract({_GROUP_SQLITE}, '$."operations@' || {_CHUNK_FIRST_SQLITE} || '"')) AS ledger_chunk"""
_RECEIPTS_HELD = """(SELECT count(*) FROM checkpoints_operationevent e
      WHERE e.operation_id = o.id AND e.event IN ('completed', 'failed', 'observed'))"""

# Lock an operation's mission: the mission (locked; the caller must see it), the operation, the
# receipts it holds and the ledger chunk a change rewrites. On PostgreSQL a statement that waited
# for the lock reads the locked row as it is now but everything else as it was when the statement
# started: `read_fresh` says whether the mission row is the version the statement's snapshot saw
# (every change to the ledger updates it), and when it is not the caller, now holding the lock,
# runs the statement again.
_LOCK_OPERATION = f"""
SELECT {MISSION_COLUMNS}, {OPERATION_COLUMNS},
       {{receipts}} AS receipts_held, {{chunk}}, {{fresh}} AS read_fresh
  FROM checkpoints_operation o
  JOIN quests_mission m ON m.id = o.mission_id{{ledger}}
 WHERE o.id = %(operation_id)s
   AND m.owner_id = {{owner}}
   AND ({{token_mission}} IS NULL OR m.id = {{token_mission}})"""
# Blob writers share an advisory lock that the blob collector takes alone: a change to the
# ledger stores its chunk.
_BLOB_WRITERS_GUARD_PG = "pg_advisory_xact_lock_shared(%(blob_gc_lock)s) AS blob_writers_guard"
_FRESH_PG = "m.xmin = (SELECT seen.xmin FROM quests_mission seen WHERE seen.id = m.id)"


def _locked_pg(lock: str, *, guard_after: str) -> str:
    """A lock's statement on PostgreSQL: the blob writers' guard taken after the column
    `guard_after`, and the mission's row locked."""
    return lock.replace(guard_after, f"{guard_after}, {_BLOB_WRITERS_GUARD_PG}") + "\n   FOR UPDATE OF m"


def _lock_operation_pg(**caller: str) -> str:
    return _locked_pg(
        _LOCK_OPERATION.format(receipts=_RECEIPTS_HELD, chunk=_LEDGER_CHUNK_PG, ledger=_LEDGER_JOIN_PG, fresh=_FRESH_PG, **caller), guard_after="AS read_fresh"
    )


LOCK_OPERATION_PG = _lock_operation_pg(**GIVEN_CALLER)
LOCK_OPERATION_SQLITE = _LOCK_OPERATION.format(receipts=_RECEIPTS_HELD, chunk=_LEDGER_CHUNK_SQLITE, ledger="", fresh="1", **GIVEN_CALLER)

# Lock a run's mission to plan an operation on it: the run, its mission (locked), the operation
# already planned with the key, the last ledger chunk, and the id the new operation will have
# (taken only when the key is new).
_LOCK_PLAN = f"""
SELECT {RUN_COLUMNS}, {MISSION_COLUMNS}, {OPERATION_COLUMNS},
       {{chunk}}, {{fresh}} AS read_fresh, {{new_id}} AS new_id
  FROM quests_run r
  JOIN quests_mission m ON m.id = r.mission_id
  LEFT JOIN checkpoints_operation o ON o.mission_id = m.id AND o.key = %(key)s{{ledger}}
 WHERE r.id = %(run_id)s
   AND m.owner_id = {{owner}}
   AND ({{token_mission}} IS NULL OR m.id = {{token_mission}})"""
_NEW_OPERATION_ID_PG = "CASE WHEN o.id IS NULL THEN nextval(pg_get_serial_sequence('checkpoints_operation', 'id')) END"
# SQLite's writers are serialised from BEGIN IMMEDIATE on, so the next id is the table's sequence + 1.
_NEW_OPERATION_ID_SQLITE = "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'checkpoints_operation'), 0) + 1"


def _lock_plan_pg(**caller: str) -> str:
    return _locked_pg(
        _LOCK_PLAN.format(chunk=_LEDGER_CHUNK_PG, ledger=_LEDGER_JOIN_PG, fresh=_FRESH_PG, new_id=_NEW_OPERATION_ID_PG, **caller), guard_after="AS new_id"
    )


LOCK_PLAN_PG = _lock_plan_pg(**GIVEN_CALLER)
LOCK_PLAN_SQLITE = _LOCK_PLAN.format(chunk=_LEDGER_CHUNK_SQLITE, ledger="", fresh="1", new_id=_NEW_OPERATION_ID_SQLITE, **GIVEN_CALLER)
# Both locks for a caller the statement authenticates itself (an agent's token by its hash:
# `CALLER`; `named_as_who`): who called, the locked row (all NULL when the caller may not see the
# operation or the run), and the token's name and prefix, which the audit events name the agent by.
LOCK_OPERATION_AS_WHO_PG = named_as_who(_lock_operation_pg(**WHO_CALLER))
LOCK_OPERATION_AS_WHO_COUNTED_PG = counted_pg(LOCK_OPERATION_AS_WHO_PG, last_column="AS token_prefix")
LOCK_PLAN_AS_WHO_PG = named_as_who(_lock_plan_pg(**WHO_CALLER))
LOCK_PLAN_AS_WHO_COUNTED_PG = counted_pg(LOCK_PLAN_AS_WHO_PG, last_column="AS token_prefix")

# Write an operation's change: the beat of the run that made it (plan and attempt; a receipt is
# accepted from an ended run and beats nothing), the operation (planned: inserted with the id its
# lock took; changed: every column a call may change), its event, its audit event, and the save
# state (the ledger chunk's blob, the mission's current document and state version, a snapshot
# asked for), as `state_save` saves it.
_OPERATION_BEAT = "UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = %(beat_run_id)s"
_OPERATION_INSERT = """INSERT INTO checkpoints_operation (
        id, created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, key, request_hash, kind,
        target, request, status, attempts, max_attempts, external_id, external_status, receipt, completion_hash, error,
        retryable, updated_at)
    VALUES (%(operation_id)s, %(now)s, 'working', NULL, NULL, %(mission_id)s, %(run_id)s, %(key)s, %(request_hash)s, %(kind)s,
        %(target)s, CAST(%(request)s AS {json}), %(status)s, %(attempts)s, %(max_attempts)s, %(external_id)s,
        %(external_status)s, CAST(%(receipt)s AS {json}), %(completion_hash)s, %(error)s, %(retryable)s, %(now)s)"""
_OPERATION_UPDATE = """UPDATE checkpoints_operation
       SET status = %(status)s, attempts = %(attempts)s, external_id = %(external_id)s,
           external_status = %(external_status)s, receipt = CAST(%(receipt)s AS {json}),
           completion_hash = %(completion_hash)s, error = %(error)s, retryable = %(retryable)s, updated_at = %(now)s
     WHERE id = %(operation_id)s"""
_OPERATION_EVENT = """INSERT INTO checkpoints_operationevent (
        created_at, retention_class, retention_approved_at, expires_at, operation_id, event, external_status, receipt, error)
    VALUES (%(now)s, 'working', NULL, NULL, %(operation_id)s, %(event)s, %(event_external_status)s,
        CAST(%(event_receipt)s AS {json}), %(event_error)s)"""
_OPERATION_AUDIT = """INSERT INTO quests_auditevent (
        created_at, mission_id, actor_user_id, actor_token_id, actor, entity, entity_id, action, from_state, to_state, data)
    VALUES (%(now)s, %(mission_id)s, %(actor_user_id)s, %(actor_token_id)s, %(actor)s, 'operation', %(operation_id)s,
        %(action)s, %(from_state)s, %(to_state)s, CAST(%(audit_data)s AS {json}))"""
_OPERATION_WRITE_PG = """
WITH beat AS (
    {_OPERATION_BEAT}
), written AS (
    {written}
), evented AS (
    {event}
), audited AS (
    {audit}
), stored AS (
    {STORE_PARTS_PG}
), saved AS (
    {save}
), requested AS (
    {ASK_SNAPSHOT}
)
SELECT id FROM requested"""
_OPERATION_WRITE_PIECES = {
    "_OPERATION_BEAT": _OPERATION_BEAT,
    "event": _OPERATION_EVENT.format(json="jsonb"),
    "audit": _OPERATION_AUDIT.format(json="jsonb"),
    "STORE_PARTS_PG": STORE_PARTS_PG,
    "save": SAVE_STATE.format(json="jsonb"),
    "ASK_SNAPSHOT": ASK_SNAPSHOT,
}
OPERATION_PLAN_PG = _OPERATION_WRITE_PG.format(written=_OPERATION_INSERT.format(json="jsonb"), **_OPERATION_WRITE_PIECES)
OPERATION_CHANGE_PG = _OPERATION_WRITE_PG.format(written=_OPERATION_UPDATE.format(json="jsonb"), **_OPERATION_WRITE_PIECES)
# SQLite: the beat (when there is one), the operation, its event, its audit event, each part no
# row holds yet, the save state, the snapshot request.
_OPERATION_STEPS_SQLITE = (
    _OPERATION_EVENT.format(json="text"),
    _OPERATION_AUDIT.format(json="text"),
    STORE_PART_SQLITE,  # once per part
    SAVE_STATE.format(json="text"),
    ASK_SNAPSHOT,
)
OPERATION_PLAN_SQLITE = (_OPERATION_BEAT, _OPERATION_INSERT.format(json="text"), *_OPERATION_STEPS_SQLITE)
OPERATION_CHANGE_SQLITE = (_OPERATION_BEAT, _OPERATION_UPDATE.format(json="text"), *_OPERATION_STEPS_SQLITE)
