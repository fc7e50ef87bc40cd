"""Every statement of the agent's hot path, by name. Parameters are named (`%(name)s`); the runner
binds them server-side on PostgreSQL and as `:name` on SQLite.

A statement that only PostgreSQL can run in one piece (row locks, advisory locks, data-modifying
CTEs) has a `_PG` text; its SQLite counterpart is the same work as `_SQLITE` steps run in order
(SQLite serialises writers at BEGIN IMMEDIATE, so it needs no row lock)."""

from checkpoints.models import DURABLE_RECORD_KINDS

# The columns of a mission and a run, in their models' field order (`runner.model_from_row`
# builds the instances from them).
MISSION_COLUMNS = """
    m.id, m.created_at, m.retention_class, m.retention_approved_at, m.expires_at, m.owner_id, m.title,
    m.objective, m.status, m.stop_reason, m.stop_detail, m.retry_at, m.ended_at, m.updated_at,
    m.planned_milestones, m.head_checkpoint_id, m.last_verified_checkpoint_id, m.next_checkpoint_seq,
    m.run_count, m.state_version, m.active_run_id, m.state_refs, m.state_pending, m.state_report,
    m.snapshot_claimed_at, m.purged_at"""
RUN_COLUMNS = """
    r.id, r.mission_id, r.number, r.agent, r.started_at, r.heartbeat_at, r.ended_at, r.stop_reason,
    r.stop_detail, r.token_id"""

# --- Lock a run's mission -------------------------------------------------------------------------
# The run, its mission locked, and what the write needs to know before it writes: what the
# idempotency key already made (under the mission owner's account, in the mission's scope), and
# the head checkpoint's agent-state refs (so unchanged parts are not sent again). The caller sees
# only its own missions, and only its token's mission when the token is limited to one.
_LOCK_RUN = f"""
SELECT {RUN_COLUMNS}, {MISSION_COLUMNS},
       head.id AS head_seen_id, head.agent_state_refs AS head_seen_parts,
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash
  FROM quests_run r
  JOIN quests_mission m ON m.id = r.mission_id
  LEFT JOIN checkpoints_checkpoint head ON head.id = m.head_checkpoint_id
  LEFT JOIN quests_idempotentrequest earlier
         ON earlier.owner_id = m.owner_id
        AND earlier.scope = 'm' || m.id || ':' || %(key_suffix)s
        AND earlier.key = %(key)s
 WHERE r.id = %(run_id)s
   AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)"""
# Blob writers share an advisory lock that the blob collector takes alone (checkpoints.pruning).
LOCK_RUN_PG = (
    _LOCK_RUN.replace(
        "earlier.request_hash AS replay_request_hash",
        "earlier.request_hash AS replay_request_hash,\n       pg_advisory_xact_lock_shared(%(blob_gc_lock)s) AS blob_writers_guard",
    )
    + "\n   FOR UPDATE OF m"
)
LOCK_RUN_SQLITE = _LOCK_RUN

# --- Write a checkpoint ----------------------------------------------------------------------------
# The blobs it needs that are new, the notes a compaction pass archives (their blobs go with the
# others), its row, the key that made it, the run's heartbeat, and the mission's head moved to it
# with the save state's bookkeeping. `new_bytes` counts the state's blobs this statement stored.
# Everything hangs off `claimed`, the row the checkpoint gets its id from: under the mission's row
# lock (the locked path) it is simply the next id; on the agent's fast path it is the mission row
# the compare-and-set claimed, so that nothing is written when the mission moved meanwhile.
_CHECKPOINT_WRITE = """
WITH {claim}, beat AS (
    UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = %(beat_run_id)s AND EXISTS (SELECT 1 FROM claimed)
), stored AS (
    INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    SELECT sent.sha, sent.data, length(sent.data), sent.media_type, %(now)s, 'working', NULL, NULL
      FROM unnest(CAST(%(blob_shas)s AS text[]), CAST(%(blob_data)s AS bytea[]), CAST(%(blob_media)s AS text[])) AS sent(sha, data, media_type)
     WHERE EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT DO NOTHING
    RETURNING sha256, size_bytes
), archived AS (
    UPDATE checkpoints_record
       SET blob_id = moved.blob_id, text = moved.preview, size_bytes = moved.size_bytes, archived = TRUE
      FROM unnest(CAST(%(archived_ids)s AS bigint[]), CAST(%(archived_blobs)s AS text[]), CAST(%(archived_previews)s AS text[]),
                  CAST(%(archived_sizes)s AS integer[])) AS moved(id, blob_id, preview, size_bytes)
     WHERE checkpoints_record.id = moved.id AND EXISTS (SELECT 1 FROM claimed)
), made AS (
    INSERT INTO checkpoints_checkpoint (
        id, created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, parent_id, seq, trigger,
        hash, verified, verified_at, note, state_refs, agent_state_refs, record_watermark, size_bytes,
        agent_state_bytes, new_bytes, compaction_report)
    SELECT
        claimed.id, %(now)s, 'working', NULL, NULL, CAST(%(mission_id)s AS bigint), CAST(%(run_id)s AS bigint),
        CAST(%(parent_id)s AS bigint), CAST(%(seq)s AS integer), CAST(%(trigger)s AS text),
        CAST(%(hash)s AS text), false, NULL, CAST(%(note)s AS text), CAST(%(state_refs)s AS jsonb), CAST(%(agent_state_refs)s AS jsonb),
        CAST(%(record_watermark)s AS bigint), CAST(%(size_bytes)s AS bigint), CAST(%(agent_state_bytes)s AS bigint),
        (SELECT COALESCE(SUM(size_bytes), 0) FROM stored WHERE sha256 = ANY(CAST(%(counted)s AS text[]))),
        CAST(%(compaction_report)s AS jsonb)
      FROM claimed
    RETURNING id, new_bytes
), remembered AS (
    INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(key_owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, made.id, %(now)s
      FROM made
     WHERE CAST(%(key)s AS text) IS NOT NULL
){move}
SELECT id, new_bytes FROM made"""
# The mission's head moved to the checkpoint, with its save state's bookkeeping.
_CHECKPOINT_MISSION_MOVED = """UPDATE quests_mission
       SET head_checkpoint_id = {head}, next_checkpoint_seq = %(seq)s + 1, updated_at = %(now)s,
           state_refs = CAST(%(mission_state_refs)s AS jsonb), state_pending = '{{}}',
           state_report = CAST(%(mission_state_report)s AS jsonb)"""
CHECKPOINT_WRITE_PG = _CHECKPOINT_WRITE.format(
    claim="claimed AS (\n    SELECT nextval('checkpoints_checkpoint_id_seq') AS id\n)",
    move=f""", moved AS (
    {_CHECKPOINT_MISSION_MOVED.format(head="made.id")}
      FROM made
     WHERE quests_mission.id = %(mission_id)s
)""",
)

# --- The agent's checkpoint in two round trips -------------------------------------------------------
# Round trip 1, in autocommit, locking nothing: who is calling (an agent token by its hash: valid,
# not revoked, its user active, and the one mission it may be limited to; or a signed-in user as
# given), the run and its mission as the caller may see them, the head's agent-state refs, what
# the idempotency key already made, a fingerprint of the whole mission row as read, and the id the
# checkpoint will have. No row: the caller is not authenticated; a row without a run: not found.
_CALLER = """SELECT t.user_id, t.id AS token_id, t.mission_id AS token_mission_id, t.last_used_at
          FROM quests_agenttoken t JOIN auth_user u ON u.id = t.user_id
         WHERE t.token_hash = CAST(%(token_hash)s AS text) AND t.revoked_at IS NULL AND u.is_active
        UNION ALL
        SELECT CAST(%(user_id)s AS integer), NULL, CAST(%(token_mission_id)s AS bigint), NULL
         WHERE CAST(%(token_hash)s AS text) IS NULL"""
_CHECKPOINT_READ = f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at,
       {RUN_COLUMNS}, {MISSION_COLUMNS},
       head.id AS head_seen_id, head.agent_state_refs AS head_seen_parts,
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash{{extra}}
  FROM ({_CALLER}) who
  LEFT JOIN (quests_run r JOIN quests_mission m ON m.id = r.mission_id)
         ON r.id = %(run_id)s
        AND m.owner_id = who.user_id
        AND (who.token_mission_id IS NULL OR m.id = who.token_mission_id)
  LEFT JOIN checkpoints_checkpoint head ON head.id = m.head_checkpoint_id
  LEFT JOIN quests_idempotentrequest earlier
         ON earlier.owner_id = m.owner_id
        AND earlier.scope = 'm' || m.id || ':' || %(key_suffix)s
        AND earlier.key = %(key)s"""
CHECKPOINT_READ_PG = _CHECKPOINT_READ.format(
    extra=""",
       md5(CAST(m AS text)) AS mission_seen,
       CASE WHEN r.id IS NOT NULL THEN nextval('checkpoints_checkpoint_id_seq') END AS checkpoint_id"""
)
# SQLite writes under its database lock (the locked path): nothing to fingerprint or allocate.
CHECKPOINT_READ_SQLITE = _CHECKPOINT_READ.format(extra=", NULL AS mission_seen, NULL AS checkpoint_id")

# Round trip 2, in autocommit (one statement is one transaction): the checkpoint written only if
# the mission row is still the one read (same fingerprint, and the run still its active run). The
# compare-and-set is the mission's update itself: it moves the head to the pre-allocated id and
# locks the row to the end of the statement, so a concurrent writer either went before (then
# nothing matches here, and the caller takes the locked path) or waits. It takes the blob
# writers' shared lock first (`guard`): every insert hangs off `claimed`, so none runs before it.
# The token's last use is noted here when a minute has passed since the last one.
CHECKPOINT_CLAIMED_WRITE_PG = _CHECKPOINT_WRITE.format(
    claim=f"""guard AS (
    SELECT pg_advisory_xact_lock_shared(%(blob_gc_lock)s)
), claimed AS (
    {_CHECKPOINT_MISSION_MOVED.format(head="%(checkpoint_id)s")}
      FROM guard
     WHERE quests_mission.id = %(mission_id)s
       AND quests_mission.active_run_id = %(run_id)s
       AND md5(CAST(quests_mission AS text)) = %(mission_seen)s
    RETURNING CAST(%(checkpoint_id)s AS bigint) AS id
), token_used AS (
    UPDATE quests_agenttoken SET last_used_at = %(now)s WHERE id = %(used_token_id)s
)""",
    move="",
)

CHECKPOINT_WRITE_SQLITE = (
    "UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = %(beat_run_id)s",
    # once per blob; the row count says whether it was new
    """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
       VALUES (%(sha)s, %(data)s, length(%(data)s), %(media_type)s, %(now)s, 'working', NULL, NULL)
       ON CONFLICT DO NOTHING""",
    # once per archived note
    """UPDATE checkpoints_record SET blob_id = %(blob_id)s, text = %(preview)s, size_bytes = %(size_bytes)s, archived = TRUE
        WHERE id = %(id)s""",
    """INSERT INTO checkpoints_checkpoint (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, parent_id, seq, trigger,
        hash, verified, verified_at, note, state_refs, agent_state_refs, record_watermark, size_bytes,
        agent_state_bytes, new_bytes, compaction_report)
       VALUES (
        %(now)s, 'working', NULL, NULL, %(mission_id)s, %(run_id)s, %(parent_id)s, %(seq)s, %(trigger)s,
        %(hash)s, FALSE, NULL, %(note)s, %(state_refs)s, %(agent_state_refs)s, %(record_watermark)s, %(size_bytes)s,
        %(agent_state_bytes)s, %(new_bytes)s, %(compaction_report)s)
       RETURNING id, new_bytes""",
    """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
       VALUES (%(key_owner_id)s, %(key_scope)s, %(key)s, %(request_hash)s, %(checkpoint_id)s, %(now)s)""",
    """UPDATE quests_mission
          SET head_checkpoint_id = %(checkpoint_id)s, next_checkpoint_seq = %(seq)s + 1, updated_at = %(now)s,
              state_refs = %(mission_state_refs)s, state_pending = '{}', state_report = %(mission_state_report)s
        WHERE id = %(mission_id)s""",
)

# --- Heartbeat -------------------------------------------------------------------------------------
# A compare-and-set on the run row alone (a beat never revives an ended run), and the run read back.
HEARTBEAT_PG = f"""
WITH beat AS (
    UPDATE quests_run SET heartbeat_at = %(now)s
     WHERE id = %(run_id)s AND ended_at IS NULL
       AND mission_id IN (SELECT id FROM quests_mission
                           WHERE owner_id = %(user_id)s
                             AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR id = %(token_mission_id)s))
    RETURNING id
)
SELECT {RUN_COLUMNS}, EXISTS (SELECT 1 FROM beat) AS beaten
  FROM quests_run r JOIN quests_mission m ON m.id = r.mission_id
 WHERE r.id = %(run_id)s AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)"""
HEARTBEAT_SQLITE = (
    """UPDATE quests_run SET heartbeat_at = %(now)s
        WHERE id = %(run_id)s AND ended_at IS NULL
          AND mission_id IN (SELECT id FROM quests_mission
                              WHERE owner_id = %(user_id)s
                                AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR id = %(token_mission_id)s))""",
    f"""SELECT {RUN_COLUMNS}
          FROM quests_run r JOIN quests_mission m ON m.id = r.mission_id
         WHERE r.id = %(run_id)s AND m.owner_id = %(user_id)s
           AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)""",
)

# --- A record ----------------------------------------------------------------------------------------
# The run's heartbeat, the raw output's blob (a tool output is archived the moment it is recorded),
# the record it resolves marked resolved (a record cannot resolve itself: the new row is not yet
# visible to that update), and the record.
_RECORD_BEAT = "UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = %(run_id)s"
_RECORD_BLOB = """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    SELECT CAST(%(blob_id)s AS text), CAST(%(blob_data)s AS {bytes}), %(blob_size)s, 'text/plain', %(now)s, 'working', NULL, NULL
     WHERE CAST(%(blob_id)s AS text) IS NOT NULL
    ON CONFLICT DO NOTHING"""
_RECORD_RESOLVES = """UPDATE checkpoints_record SET resolved = TRUE
     WHERE mission_id = %(mission_id)s AND id = %(resolves)s AND NOT abandoned"""
_RECORD_INSERT = """INSERT INTO checkpoints_record (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, kind, text, data, blob_id,
        size_bytes, resolved, resolved_by_id, abandoned, archived)
    VALUES (%(now)s, 'working', NULL, NULL, %(mission_id)s, %(run_id)s, %(kind)s, %(text)s, CAST(%(data)s AS {json}),
        %(blob_id)s, %(size_bytes)s, FALSE, NULL, FALSE, %(archived)s)
    RETURNING id"""
RECORD_WRITE_PG = f"""
WITH beat AS (
    {_RECORD_BEAT}
), stored AS (
    {_RECORD_BLOB.format(bytes="bytea")}
), resolution AS (
    {_RECORD_RESOLVES}
    RETURNING id
), made AS (
    {_RECORD_INSERT.format(json="jsonb")}
)
SELECT made.id, (SELECT count(*) FROM resolution) FROM made"""
RECORD_WRITE_SQLITE = (_RECORD_BEAT, _RECORD_BLOB.format(bytes="blob"), _RECORD_RESOLVES, _RECORD_INSERT.format(json="text"))

# --- The save state changed -------------------------------------------------------------------------
# After a change to the save state (a record, constraints, …): the record a new one resolves
# learns who resolved it, the key that made the change is remembered, the parts of the current
# document that no row holds yet are stored as blobs (a ledger chunk is stored when it is made:
# the caller holds the blob writers' guard), the mission's current document and its state version
# are saved, and a background snapshot is asked for (activity while one is pending joins it: the
# insert meets the one-pending-request constraint).
_RESOLVED_BY = "UPDATE checkpoints_record SET resolved_by_id = %(resolved_by)s WHERE id = %(resolves)s"
_REMEMBER_KEY = """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(key_owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, %(object_id)s, %(now)s
     WHERE CAST(%(key)s AS text) IS NOT NULL"""
_SAVE_STATE = """UPDATE quests_mission
       SET state_version = %(state_version)s, state_refs = CAST(%(state_refs)s AS {json}),
           state_pending = CAST(%(state_pending)s AS {json}), state_report = CAST(%(state_report)s AS {json})
     WHERE id = %(mission_id)s"""
_ASK_SNAPSHOT = """INSERT INTO checkpoints_snapshotrequest (
        mission_id, status, requested_at, not_before, claimed_at, claim_token, attempts, enqueued_at, completed_at,
        checkpoint_id, outcome)
    VALUES (%(mission_id)s, 'pending', %(now)s, %(not_before)s, NULL, '', 0, NULL, NULL, NULL, '')
    ON CONFLICT DO NOTHING
    RETURNING id"""
_STORE_PARTS_PG = """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    SELECT part.sha, part.data, length(part.data), 'application/json', %(now)s, 'working', NULL, NULL
      FROM unnest(CAST(%(part_shas)s AS text[]), CAST(%(part_data)s AS bytea[])) AS part(sha, data)
    ON CONFLICT DO NOTHING"""
_STORE_PART_SQLITE = """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    VALUES (%(sha)s, %(data)s, length(%(data)s), 'application/json', %(now)s, 'working', NULL, NULL)
    ON CONFLICT DO NOTHING"""
STATE_SAVE_PG = f"""
WITH resolver AS (
    {_RESOLVED_BY}
), remembered AS (
    {_REMEMBER_KEY}
), stored AS (
    {_STORE_PARTS_PG}
), saved AS (
    {_SAVE_STATE.format(json="jsonb")}
), requested AS (
    {_ASK_SNAPSHOT}
)
SELECT id FROM requested"""
STATE_SAVE_SQLITE = (
    _RESOLVED_BY,
    _REMEMBER_KEY,
    _STORE_PART_SQLITE,  # once per part
    _SAVE_STATE.format(json="text"),
    _ASK_SNAPSHOT,
)

# --- Start a run --------------------------------------------------------------------------------------
# The mission locked, with what the key already made (as for a run's writes).
_LOCK_MISSION = f"""
SELECT {MISSION_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash
  FROM quests_mission m
  LEFT JOIN quests_idempotentrequest earlier
         ON earlier.owner_id = m.owner_id
        AND earlier.scope = 'm' || m.id || ':' || %(key_suffix)s
        AND earlier.key = %(key)s
 WHERE m.id = %(mission_id)s
   AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)"""
LOCK_MISSION_PG = _LOCK_MISSION + "\n   FOR UPDATE OF m"
LOCK_MISSION_SQLITE = _LOCK_MISSION

# The run, the mission moved to it (its status, run count, active run and state version), the audit
# events (a missing entity id is the new run's), and the key. `{new}` names the new run's id.
_RUN_INSERT = """INSERT INTO quests_run (mission_id, number, agent, started_at, heartbeat_at, ended_at, stop_reason, stop_detail, token_id)
    VALUES (%(mission_id)s, %(number)s, %(agent)s, %(now)s, %(now)s, NULL, NULL, '', %(token_id)s)
    RETURNING id"""
_RUN_MISSION_MOVED = """UPDATE quests_mission
       SET status = %(status)s, run_count = %(number)s, active_run_id = {new}, updated_at = %(now)s,
           state_version = %(state_version)s
     WHERE id = %(mission_id)s"""
_AUDIT_EVENT = """INSERT INTO quests_auditevent (
        created_at, mission_id, actor_user_id, actor_token_id, actor, entity, entity_id, action, from_state, to_state, data)
    VALUES (%(now)s, %(mission_id)s, %(actor_user_id)s, %(actor_token_id)s, %(actor)s, %(entity)s,
        COALESCE(CAST(%(entity_id)s AS bigint), {new}), %(action)s, %(from_state)s, %(to_state)s, CAST(%(data)s AS {json}))"""
_RUN_KEY = """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(key_owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, {new}, %(now)s
     WHERE CAST(%(key)s AS text) IS NOT NULL"""
_AUDIT_EVENTS_PG = """INSERT INTO quests_auditevent (
        created_at, mission_id, actor_user_id, actor_token_id, actor, entity, entity_id, action, from_state, to_state, data)
    SELECT %(now)s, %(mission_id)s, %(actor_user_id)s, %(actor_token_id)s, %(actor)s, event.entity,
           COALESCE(event.entity_id, {new}), event.action, event.from_state, event.to_state, event.data
      FROM unnest(CAST(%(event_entities)s AS text[]), CAST(%(event_entity_ids)s AS bigint[]),
                  CAST(%(event_actions)s AS text[]), CAST(%(event_from_states)s AS text[]),
                  CAST(%(event_to_states)s AS text[]), CAST(%(event_data)s AS jsonb[]))
           AS event(entity, entity_id, action, from_state, to_state, data)"""
_NEW_RUN_PG = "(SELECT id FROM started)"
RUN_START_PG = f"""
WITH started AS (
    {_RUN_INSERT}
), moved AS (
    {_RUN_MISSION_MOVED.format(new=_NEW_RUN_PG)}
), audited AS (
    {_AUDIT_EVENTS_PG.format(new=_NEW_RUN_PG)}
), remembered AS (
    {_RUN_KEY.format(new=_NEW_RUN_PG)}
)
SELECT id FROM started"""
RUN_START_SQLITE = (
    _RUN_INSERT,
    _RUN_MISSION_MOVED.format(new="%(run_id)s"),
    _AUDIT_EVENT.format(new="%(run_id)s", json="text"),  # once per event
    _RUN_KEY.format(new="%(run_id)s"),
)

# --- The operation ledger -------------------------------------------------------------------------------
# An operation's columns, in its model's field order.
OPERATION_COLUMNS = """
    o.id, o.created_at, o.retention_class, o.retention_approved_at, o.expires_at, o.mission_id, o.run_id, o.key,
    o.request_hash, o.kind, o.target, o.request, o.status, o.attempts, o.max_attempts, o.external_id,
    o.external_status, o.receipt, o.completion_hash, o.error, o.retryable, o.updated_at"""
# The columns of a ledger row (checkpoints.sections.COLUMNS["operations"]), as one JSON object each.
_LEDGER_ROW_PG = """json_build_object('id', l.id, 'key', l.key, 'kind', l.kind, 'target', l.target, 'request', l.request,
        'status', l.status, 'attempts', l.attempts, 'max_attempts', l.max_attempts, 'external_id', l.external_id,
        'external_status', l.external_status, 'receipt', l.receipt, 'error', l.error, 'retryable', l.retryable)"""
_LEDGER_ROW_SQLITE = """json_object('id', l.id, 'key', l.key, 'kind', l.kind, 'target', l.target, 'request', json(l.request),
        'status', l.status, 'attempts', l.attempts, 'max_attempts', l.max_attempts, 'external_id', l.external_id,
        'external_status', l.external_status, 'receipt', json(l.receipt), 'error', l.error, 'retryable', l.retryable)"""
# The first ids of the ledger's chunks, as the mission's save-state report lists them.
_LEDGER_FIRSTS_PG = "(SELECT CAST(f AS bigint) AS f FROM jsonb_array_elements_text(m.state_report -> 'ledger') AS f)"
_LEDGER_FIRSTS_SQLITE = "(SELECT CAST(value AS integer) AS f FROM json_each(m.state_report, '$.ledger'))"
# The ledger rows a change rewrites (savestate.read_ledger's bounds): the chunk holding the
# operation `chunk_of`; for an operation about to be planned (`chunk_of` past every id) the last
# chunk and what follows it. (No operation id reaches the bigint maximum, the open upper bound.)
_LEDGER_CHUNK = """(SELECT {agg}
       FROM checkpoints_operation l
      WHERE l.mission_id = m.id
        AND l.id >= COALESCE((SELECT max(f) FROM {firsts} AS firsts WHERE f <= %(chunk_of)s), 0)
        AND l.id < COALESCE((SELECT min(f) FROM {firsts} AS firsts WHERE f > %(chunk_of)s), 9223372036854775807))"""
_LEDGER_CHUNK_PG = _LEDGER_CHUNK.format(agg=f"COALESCE(json_agg({_LEDGER_ROW_PG} ORDER BY l.id), '[]')", firsts=_LEDGER_FIRSTS_PG)
_LEDGER_CHUNK_SQLITE = _LEDGER_CHUNK.format(agg=f"json_group_array(json({_LEDGER_ROW_SQLITE}))", firsts=_LEDGER_FIRSTS_SQLITE)
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
       {{receipts}} AS receipts_held, {{chunk}} AS ledger_chunk, {{fresh}} AS read_fresh
  FROM checkpoints_operation o
  JOIN quests_mission m ON m.id = o.mission_id
 WHERE o.id = %(operation_id)s
   AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)"""
# Blob writers share an advisory lock that the blob collector takes alone: a change to the
# ledger stores its chunk.
_BLOB_WRITERS_GUARD_PG = "pg_advisory_xact_lock_shared(%(blob_gc_lock)s) AS blob_writers_guard"
_FRESH_PG = "m.xmin = (SELECT seen.xmin FROM quests_mission seen WHERE seen.id = m.id)"
LOCK_OPERATION_PG = (
    _LOCK_OPERATION.format(receipts=_RECEIPTS_HELD, chunk=_LEDGER_CHUNK_PG, fresh=_FRESH_PG).replace(
        "AS read_fresh", f"AS read_fresh, {_BLOB_WRITERS_GUARD_PG}"
    )
    + "\n   FOR UPDATE OF m"
)
LOCK_OPERATION_SQLITE = _LOCK_OPERATION.format(receipts=_RECEIPTS_HELD, chunk=_LEDGER_CHUNK_SQLITE, fresh="1")

# Lock a run's mission to plan an operation on it: the run, its mission (locked), the operation
# already planned with the key, the last ledger chunk, and the id the new operation will have
# (taken only when the key is new).
_LOCK_PLAN = f"""
SELECT {RUN_COLUMNS}, {MISSION_COLUMNS}, {OPERATION_COLUMNS},
       {{chunk}} AS ledger_chunk, {{fresh}} AS read_fresh, {{new_id}} AS new_id
  FROM quests_run r
  JOIN quests_mission m ON m.id = r.mission_id
  LEFT JOIN checkpoints_operation o ON o.mission_id = m.id AND o.key = %(key)s
 WHERE r.id = %(run_id)s
   AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)"""
_NEW_OPERATION_ID_PG = "CASE WHEN o.id IS NULL THEN nextval(pg_get_serial_sequence('checkpoints_operation', 'id')) END"
# SQLite's writers are serialised from BEGIN IMMEDIATE on, so the next id is the table's sequence + 1.
_NEW_OPERATION_ID_SQLITE = "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'checkpoints_operation'), 0) + 1"
LOCK_PLAN_PG = (
    _LOCK_PLAN.format(chunk=_LEDGER_CHUNK_PG, fresh=_FRESH_PG, new_id=_NEW_OPERATION_ID_PG).replace("AS new_id", f"AS new_id, {_BLOB_WRITERS_GUARD_PG}")
    + "\n   FOR UPDATE OF m"
)
LOCK_PLAN_SQLITE = _LOCK_PLAN.format(chunk=_LEDGER_CHUNK_SQLITE, fresh="1", new_id=_NEW_OPERATION_ID_SQLITE)

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
    {_STORE_PARTS_PG}
), saved AS (
    {save}
), requested AS (
    {_ASK_SNAPSHOT}
)
SELECT id FROM requested"""
_OPERATION_WRITE_PIECES = {
    "_OPERATION_BEAT": _OPERATION_BEAT,
    "event": _OPERATION_EVENT.format(json="jsonb"),
    "audit": _OPERATION_AUDIT.format(json="jsonb"),
    "_STORE_PARTS_PG": _STORE_PARTS_PG,
    "save": _SAVE_STATE.format(json="jsonb"),
    "_ASK_SNAPSHOT": _ASK_SNAPSHOT,
}
OPERATION_PLAN_PG = _OPERATION_WRITE_PG.format(written=_OPERATION_INSERT.format(json="jsonb"), **_OPERATION_WRITE_PIECES)
OPERATION_CHANGE_PG = _OPERATION_WRITE_PG.format(written=_OPERATION_UPDATE.format(json="jsonb"), **_OPERATION_WRITE_PIECES)
# SQLite: the beat (when there is one), the operation, its event, its audit event, each part no
# row holds yet, the save state, the snapshot request.
_OPERATION_STEPS_SQLITE = (
    _OPERATION_EVENT.format(json="text"),
    _OPERATION_AUDIT.format(json="text"),
    _STORE_PART_SQLITE,  # once per part
    _SAVE_STATE.format(json="text"),
    _ASK_SNAPSHOT,
)
OPERATION_PLAN_SQLITE = (_OPERATION_BEAT, _OPERATION_INSERT.format(json="text"), *_OPERATION_STEPS_SQLITE)
OPERATION_CHANGE_SQLITE = (_OPERATION_BEAT, _OPERATION_UPDATE.format(json="text"), *_OPERATION_STEPS_SQLITE)

# --- The LangGraph saver's put_writes ----------------------------------------------------------------
# A task's writes on a checkpoint of a live thread whose session run is going: the mission locked
# (writes of one thread queue behind each other), the writes kept (a special channel, at a negative
# index, replaces the one before it; an ordinary write keeps the first one sent for its task and
# index), the mission titled when it is still named after its thread, and the run's heartbeat.
# Nothing is written when the thread, its mission or a fresh session run is not there: the service
# then takes its general path (first write of a thread, a run to start, a deleted thread).
_GRAPH_WRITES_TARGET = """
SELECT m.id, m.active_run_id, m.title
  FROM quests_mission m
  JOIN quests_graphthread t ON t.mission_id = m.id
  JOIN quests_run r ON r.id = m.active_run_id
 WHERE t.thread_id = %(thread_id)s AND t.deleted_at IS NULL
   AND m.owner_id = %(user_id)s
   AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s)
   AND r.heartbeat_at >= %(fresh_after)s
 LIMIT 1"""
_GRAPH_WRITE_INSERT = """INSERT INTO checkpoints_graphwrite (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, ns, graph_id, task_id, task_path, idx, channel, value)
    {rows}
    ON CONFLICT (mission_id, ns, graph_id, task_id, idx) {on_conflict}"""
_GRAPH_WRITE_REPLACES = "DO UPDATE SET channel = excluded.channel, value = excluded.value, task_path = excluded.task_path"
_GRAPH_WRITE_KEEPS = "DO NOTHING"
_GRAPH_WRITES_UNNEST = """SELECT %(now)s, 'working', NULL, NULL, target.id, %(ns)s, %(graph_id)s, %(task_id)s, %(task_path)s, w.idx, w.channel, w.value
      FROM target, unnest(CAST(%({kind}_idx)s AS integer[]), CAST(%({kind}_channels)s AS text[]), CAST(%({kind}_values)s AS jsonb[]))
           AS w(idx, channel, value)"""
_GRAPH_WRITE_VALUES = """VALUES (%(now)s, 'working', NULL, NULL, %(mission_id)s, %(ns)s, %(graph_id)s, %(task_id)s, %(task_path)s, %(idx)s,
        %(channel)s, %(value)s)"""
_GRAPH_WRITES_TITLE = """UPDATE quests_mission SET title = substr(%(title)s, 1, 200), objective = %(title)s, updated_at = %(now)s
     WHERE id = {mission_id} AND %(title)s <> '' AND title = %(thread_id)s"""
_GRAPH_WRITES_BEAT = "UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = {run_id}"
GRAPH_WRITES_PG = f"""
WITH target AS ({_GRAPH_WRITES_TARGET}
       FOR UPDATE OF m
), replaced AS (
    {_GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITES_UNNEST.format(kind="special"), on_conflict=_GRAPH_WRITE_REPLACES)}
), kept AS (
    {_GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITES_UNNEST.format(kind="ordinary"), on_conflict=_GRAPH_WRITE_KEEPS)}
), titled AS (
    {_GRAPH_WRITES_TITLE.format(mission_id="(SELECT id FROM target)")}
), beat AS (
    {_GRAPH_WRITES_BEAT.format(run_id="(SELECT active_run_id FROM target)")}
)
SELECT id FROM target"""
GRAPH_WRITES_SQLITE = (
    _GRAPH_WRITES_TARGET,
    _GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITE_VALUES, on_conflict=_GRAPH_WRITE_REPLACES),  # once per special write
    _GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITE_VALUES, on_conflict=_GRAPH_WRITE_KEEPS),  # once per ordinary write
    _GRAPH_WRITES_TITLE.format(mission_id="%(mission_id)s"),
    _GRAPH_WRITES_BEAT.format(run_id="%(run_id)s"),
)

# ==================================================================================================
# Reads
# ==================================================================================================

# --- The resume bundle -----------------------------------------------------------------------------
# Everything the next run is told, by section, each section a plain SELECT of the columns its part
# of the answer shows, named as the answer names them (the API's "null for not yet" and "archived
# means it has a blob" are said here). Every section stands alone on its parameters (the mission's
# id; the caller's account and token, which only the mission section checks: the bundle is
# answered only when that row is found), so SQLite runs them one by one and PostgreSQL runs them
# as one statement of subqueries (`RESUME_BUNDLE_PG`), one round trip whatever the mission holds.
# Their cost follows what is live (active constraints, live records, the ledger), never the
# length of the history: the checkpoints are reached through the mission's head and verified ids.
_THIS_MISSION = "(SELECT {column} FROM quests_mission WHERE id = %(mission_id)s)"

# The head checkpoint's agent-state references ({key: blob sha256}), as a JSON map: the one place
# the bundle says where those references live (the checkpoint row, aliased `head`).
AGENT_STATE_REFS = "head.agent_state_refs"

_DURABLE_KINDS = ", ".join(f"'{kind}'" for kind in DURABLE_RECORD_KINDS)

# (section, SELECT, order of its rows; None for a single row)
RESUME_BUNDLE_SECTIONS: tuple[tuple[str, str, str | None], ...] = (
    (
        "mission",
        """SELECT id, title, objective, status, stop_reason, stop_detail, retry_at, run_count, owner_id
             FROM quests_mission
            WHERE id = %(mission_id)s
              AND (CAST(%(user_id)s AS bigint) IS NULL OR owner_id = %(user_id)s)
              AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR id = %(token_mission_id)s)""",
        None,
    ),
    (
        "checkpoint",
        f"""SELECT id, seq, hash, verified, trigger, created_at FROM checkpoints_checkpoint
             WHERE id = {_THIS_MISSION.format(column="head_checkpoint_id")}""",
        None,
    ),
    (
        "last_verified_checkpoint",
        f"""SELECT id, seq, hash FROM checkpoints_checkpoint
             WHERE id = {_THIS_MISSION.format(column="last_verified_checkpoint_id")}""",
        None,
    ),
    (
        "constraints",
        """SELECT id, text, source, created_at FROM quests_constraint
            WHERE mission_id = %(mission_id)s AND retired_at IS NULL""",
        "id",
    ),
    (
        "records",
        f"""SELECT id, kind, text, data, resolved, resolved_by_id, abandoned, blob_id IS NOT NULL AS archived,
                   blob_id AS blob_sha256, size_bytes, created_at
              FROM checkpoints_record
             WHERE mission_id = %(mission_id)s AND NOT resolved AND NOT abandoned AND kind IN ({_DURABLE_KINDS})""",
        "id",
    ),
    (
        "ledger",
        """SELECT id, key, kind, target, request, status, attempts, max_attempts, NULLIF(external_id, '') AS external_id,
                  NULLIF(external_status, '') AS external_status, receipt, NULLIF(error, '') AS error, retryable,
                  created_at, updated_at
             FROM checkpoints_operation
            WHERE mission_id = %(mission_id)s""",
        "id",
    ),
    (
        "milestones",
        """SELECT id, kind, title, review_status, note, gate, withdrawn FROM quests_milestone
            WHERE mission_id = %(mission_id)s""",
        "id",
    ),
    (
        "approvals",
        """SELECT id, action, payload, reason, status, decided_payload, note, agent_ref, always, node, question
             FROM quests_approval
            WHERE mission_id = %(mission_id)s""",
        "id",
    ),
    (
        "active_runs",
        """SELECT number FROM quests_run WHERE mission_id = %(mission_id)s AND ended_at IS NULL""",
        "number",
    ),
    (
        "memory",
        f"""SELECT id, name, value FROM quests_memoryitem
             WHERE owner_id = {_THIS_MISSION.format(column="owner_id")}
               AND (expires_at IS NULL OR expires_at > %(now)s)""",
        "name, id",
    ),
    (
        "standing_decisions",
        """SELECT id, action, decision, note, created_at, revoked_at FROM quests_standingdecision
            WHERE mission_id = %(mission_id)s""",
        "id",
    ),
)

# The head checkpoint's agent state: each referenced blob's JSON under its key, in the order of
# the references (as `checkpoints.services.parts_get` reads it). A reference whose blob is gone is
# left out, as there.
HEAD_AGENT_STATE_PG = f"""
SELECT json_object_agg(ref.key, convert_from(b.data, 'UTF8')::json ORDER BY ref.n)
  FROM checkpoints_checkpoint head
 CROSS JOIN LATERAL jsonb_each_text({AGENT_STATE_REFS}) WITH ORDINALITY AS ref(key, sha, n)
  JOIN checkpoints_blob b ON b.sha256 = ref.sha
 WHERE head.id = {_THIS_MISSION.format(column="head_checkpoint_id")}"""
HEAD_AGENT_STATE_SQLITE = f"""
SELECT ref.key, b.data
  FROM checkpoints_checkpoint head, json_each({AGENT_STATE_REFS}) ref
  JOIN checkpoints_blob b ON b.sha256 = ref.value
 WHERE head.id = {_THIS_MISSION.format(column="head_checkpoint_id")}
 ORDER BY ref.id"""


def _as_json(select: str, order: str | None) -> str:
    if order is None:
        return f"(SELECT row_to_json(s) FROM ({select}) s)"
    ordered = ", ".join(f"s.{column.strip()}" for column in order.split(","))
    return f"(SELECT COALESCE(json_agg(s ORDER BY {ordered}), '[]') FROM ({select}) s)"


# One row: each section as JSON (a row or a list of rows), then the head's agent state.
RESUME_BUNDLE_PG = (
    "SELECT "
    + ",\n       ".join(f"{_as_json(select, order)} AS {name}" for name, select, order in RESUME_BUNDLE_SECTIONS)
    + f",\n       ({HEAD_AGENT_STATE_PG}) AS agent_state"
)
RESUME_BUNDLE_SQLITE = tuple(select if order is None else f"{select} ORDER BY {order}" for _, select, order in RESUME_BUNDLE_SECTIONS) + (
    HEAD_AGENT_STATE_SQLITE,
)

# --- The LangGraph saver's get_tuple ---------------------------------------------------------------
# A thread's latest checkpoint in a namespace (or the one with the given id), with its pending
# writes in LangGraph's order and each channel's value from its blob, in the order of the channel
# map (a channel whose blob is gone is left out). The thread is the caller's live one (the
# (owner, thread id) index) on a mission the caller sees; the checkpoint is the first step of a
# backward walk of the (mission, ns, graph_id) index, whatever the thread's length.
_GRAPH_TUPLE_FOUND = """
SELECT c.id, c.mission_id, c.ns, c.graph_id, c.parent_graph_id, c.skeleton, c.metadata, c.channels, c.checkpoint_id
  FROM checkpoints_graphcheckpoint c
 WHERE c.mission_id = (
        SELECT t.mission_id FROM quests_graphthread t JOIN quests_mission m ON m.id = t.mission_id
         WHERE t.owner_id = %(user_id)s AND t.thread_id = %(thread_id)s AND t.deleted_at IS NULL
           AND m.owner_id = %(user_id)s
           AND (CAST(%(token_mission_id)s AS bigint) IS NULL OR m.id = %(token_mission_id)s))
   AND c.ns = %(ns)s
   AND (CAST(%(graph_id)s AS text) IS NULL OR c.graph_id = %(graph_id)s)
 ORDER BY c.graph_id DESC
 LIMIT 1"""
_GRAPH_TUPLE_WRITES = """
SELECT w.task_id, w.task_path, w.idx, w.channel, w.value
  FROM checkpoints_graphwrite w
 WHERE w.mission_id = {mission_id} AND w.ns = {ns} AND w.graph_id = {graph_id}"""
_GRAPH_TUPLE_WRITES_ORDER = "task_path, task_id, idx"
GRAPH_TUPLE_PG = f"""
WITH found AS ({_GRAPH_TUPLE_FOUND}
)
SELECT found.mission_id, found.ns, found.graph_id, found.parent_graph_id, found.skeleton, found.metadata, found.checkpoint_id,
       (SELECT COALESCE(json_agg(s ORDER BY {", ".join(f"s.{column}" for column in _GRAPH_TUPLE_WRITES_ORDER.split(", "))}), '[]')
          FROM ({_GRAPH_TUPLE_WRITES.format(mission_id="found.mission_id", ns="found.ns", graph_id="found.graph_id")}) s) AS pending_writes,
       (SELECT json_object_agg(channel.name, convert_from(b.data, 'UTF8')::json ORDER BY channel.n)
          FROM jsonb_each(found.channels) WITH ORDINALITY AS channel(name, ref, n)
          JOIN checkpoints_blob b ON b.sha256 = channel.ref->>1) AS channel_values
  FROM found"""
GRAPH_TUPLE_SQLITE = (
    _GRAPH_TUPLE_FOUND,
    # with the found row's mission, ns and graph id
    _GRAPH_TUPLE_WRITES.format(mission_id="%(mission_id)s", ns="%(ns)s", graph_id="%(graph_id)s") + f" ORDER BY {_GRAPH_TUPLE_WRITES_ORDER}",
    # with the found row's channel map
    """SELECT channel.key AS name, b.data
         FROM json_each(%(channels)s) channel
         JOIN checkpoints_blob b ON b.sha256 = json_extract(channel.value, '$[1]')
        ORDER BY channel.id""",
)
# --- Create a mission -----------------------------------------------------------------------------------
# What the key already made (a mission create's key is the account's, in scope `missions`: there is
# no mission to scope it to yet), and, only when it made nothing: the mission, its constraints (in
# the order given: the ids follow `n`), their audit events after the mission's own, and the key.
# The save state is the next statement (STATE_SAVE_*): its constraints section holds the new ids.
MISSION_CREATE_EARLIER = """SELECT object_id, request_hash FROM quests_idempotentrequest
     WHERE owner_id = %(owner_id)s AND scope = %(key_scope)s AND key = CAST(%(key)s AS text)"""
_MISSION_INSERT = """INSERT INTO quests_mission (
        created_at, retention_class, retention_approved_at, expires_at, owner_id, title, objective, status, stop_reason,
        stop_detail, retry_at, ended_at, updated_at, planned_milestones, head_checkpoint_id, last_verified_checkpoint_id,
        next_checkpoint_seq, run_count, state_version, active_run_id, state_refs, state_pending, state_report,
        snapshot_claimed_at, purged_at)
    SELECT %(now)s, %(retention_class)s, NULL, NULL, %(owner_id)s, %(title)s, %(objective)s, %(status)s, NULL,
        '', NULL, NULL, %(now)s, CAST(%(planned_milestones)s AS {json}), NULL, NULL,
        1, 0, 0, NULL, '{{}}', '{{}}', '{{}}',
        NULL, NULL
    {unless_replayed}
    RETURNING id"""
_CONSTRAINTS_INSERT_PG = """INSERT INTO quests_constraint (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, text, source, retired_at, retired_by_id, replaces_id)
    SELECT %(now)s, %(retention_class)s, NULL, NULL, made.id, given.text, %(source)s, NULL, NULL, NULL
      FROM made, unnest(CAST(%(constraint_texts)s AS text[])) WITH ORDINALITY AS given(text, n)
     ORDER BY given.n
    RETURNING id, text"""
_AUDIT_COLUMNS = "created_at, mission_id, actor_user_id, actor_token_id, actor, entity, entity_id, action, from_state, to_state, data"
_MISSION_AUDIT_PG = f"""INSERT INTO quests_auditevent ({_AUDIT_COLUMNS})
    SELECT %(now)s, made.id, %(actor_user_id)s, %(actor_token_id)s, %(actor)s, event.entity, COALESCE(event.entity_id, made.id),
           event.action, event.from_state, event.to_state, event.data
      FROM made, (SELECT 0 AS n, 'mission' AS entity, CAST(NULL AS bigint) AS entity_id, 'create' AS action, '' AS from_state,
                         CAST(%(status)s AS text) AS to_state, CAST('{{}}' AS jsonb) AS data
                  UNION ALL
                  SELECT added.id, 'constraint', added.id, 'add', '', 'active', jsonb_build_object('text', added.text)
                    FROM added) AS event
     ORDER BY event.n"""
_MISSION_KEY_PG = """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, made.id, %(now)s
      FROM made
     WHERE CAST(%(key)s AS text) IS NOT NULL"""
MISSION_CREATE_PG = f"""
WITH earlier AS (
    {MISSION_CREATE_EARLIER}
), made AS (
    {_MISSION_INSERT.format(json="jsonb", unless_replayed="WHERE NOT EXISTS (SELECT 1 FROM earlier)")}
), added AS (
    {_CONSTRAINTS_INSERT_PG}
), audited AS (
    {_MISSION_AUDIT_PG}
), remembered AS (
    {_MISSION_KEY_PG}
)
SELECT (SELECT id FROM made), (SELECT array_agg(id ORDER BY id) FROM added),
       (SELECT object_id FROM earlier), (SELECT request_hash FROM earlier)"""
MISSION_CREATE_SQLITE = (
    MISSION_CREATE_EARLIER,
    _MISSION_INSERT.format(json="text", unless_replayed=""),
    # once per constraint, in the order given
    """INSERT INTO quests_constraint (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, text, source, retired_at, retired_by_id, replaces_id)
       VALUES (%(now)s, %(retention_class)s, NULL, NULL, %(mission_id)s, %(text)s, %(source)s, NULL, NULL, NULL)
       RETURNING id""",
    _AUDIT_EVENT.format(new="%(mission_id)s", json="text"),  # once per event
    """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
       VALUES (%(owner_id)s, %(key_scope)s, %(key)s, %(request_hash)s, %(mission_id)s, %(now)s)""",
)

# --- End a run ------------------------------------------------------------------------------------------
# The run ended, its (locked) mission moved as the state machine moved it in memory (status, stop
# reason, end, expiry, state version; its active run cleared if it was this one), and the audit
# events of both moves. The stop checkpoint is the next statement (CHECKPOINT_WRITE_*).
_RUN_ENDED = """UPDATE quests_run SET ended_at = %(ended_at)s, stop_reason = %(stop_reason)s, stop_detail = %(stop_detail)s
     WHERE id = %(run_id)s"""
_MISSION_STOPPED = """UPDATE quests_mission
       SET status = %(status)s, stop_reason = %(mission_stop_reason)s, stop_detail = %(mission_stop_detail)s,
           retry_at = %(retry_at)s, ended_at = %(mission_ended_at)s, expires_at = %(expires_at)s, updated_at = %(now)s,
           state_version = %(state_version)s,
           active_run_id = CASE WHEN active_run_id = %(run_id)s THEN NULL ELSE active_run_id END
     WHERE id = %(mission_id)s"""
RUN_END_PG = f"""
WITH ended AS (
    {_RUN_ENDED}
), moved AS (
    {_MISSION_STOPPED}
), audited AS (
    {_AUDIT_EVENTS_PG.format(new="NULL")}
)
SELECT 1"""
RUN_END_SQLITE = (_RUN_ENDED, _MISSION_STOPPED, _AUDIT_EVENT.format(new="NULL", json="text"))  # the event once per event
