"""A run's writes: the lock of its mission, the agent's checkpoint (locked, in two round trips, and in
one), the heartbeat, a record, and the save state after a change. (A run's start is a mission's
lifecycle: `lifecycle`.)"""

from quests.engine.sql import compact
from quests.engine.sql.refmaps import AGENT_BASE_JOIN, AGENT_REFS_PG, AGENT_REFS_SQLITE
from quests.engine.sql.tokens import CALLER, GIVEN_CALLER, TOKEN_CALLER, WHO_CALLER, counted_pg

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

# What an idempotency key already made on mission `m`: the key's one lookup, under the mission
# owner's account, in the mission's scope (`quests.services.idempotency`).
EARLIER_KEY_JOIN = """LEFT JOIN quests_idempotentrequest earlier
         ON earlier.owner_id = m.owner_id
        AND earlier.scope = 'm' || m.id || ':' || %(key_suffix)s
        AND earlier.key = %(key)s"""

# The head checkpoint's agent-state refs (so unchanged parts are not sent again) with how they are
# stored (the new checkpoint's delta goes on the same base), as a run's lock and the agent's
# checkpoint read them: the columns (`{head_refs}`: the dialect's refs expression) and the joins.
_HEAD_SEEN_COLUMNS = """head.id AS head_seen_id, {head_refs} AS head_seen_parts,
       head.agent_map_id AS head_seen_base, head.agent_delta AS head_seen_delta"""
_HEAD_SEEN_JOIN = f"""LEFT JOIN checkpoints_checkpoint head ON head.id = m.head_checkpoint_id
  {AGENT_BASE_JOIN.format(checkpoint="head", base="head_base")}"""
_HEAD_REFS_PG = AGENT_REFS_PG.format(checkpoint="head", base="head_base")
_HEAD_REFS_SQLITE = AGENT_REFS_SQLITE.format(checkpoint="head", base="head_base")

# --- Lock a run's mission -------------------------------------------------------------------------
# The run, its mission locked, and what the write needs to know before it writes: what the
# idempotency key already made (under the mission owner's account, in the mission's scope), and
# the head checkpoint's agent-state refs (so unchanged parts are not sent again) with how they are
# stored (the new checkpoint's delta goes on the same base). The caller sees only its own
# missions, and only its token's mission when the token is limited to one.
_LOCK_RUN = f"""
SELECT {RUN_COLUMNS}, {MISSION_COLUMNS},
       {_HEAD_SEEN_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash
  FROM quests_run r
  JOIN quests_mission m ON m.id = r.mission_id
  {_HEAD_SEEN_JOIN}
  {EARLIER_KEY_JOIN}
 WHERE r.id = %(run_id)s
   AND m.owner_id = {{owner}}
   AND ({{token_mission}} IS NULL OR m.id = {{token_mission}})"""


def _lock_run_pg(**caller: str) -> str:
    # Blob writers share an advisory lock that the blob collector takes alone (checkpoints.pruning).
    return (
        _LOCK_RUN.format(head_refs=_HEAD_REFS_PG, **caller).replace(
            "earlier.request_hash AS replay_request_hash",
            "earlier.request_hash AS replay_request_hash,\n       pg_advisory_xact_lock_shared(%(blob_gc_lock)s) AS blob_writers_guard",
        )
        + "\n   FOR UPDATE OF m"
    )


LOCK_RUN_PG = _lock_run_pg(**GIVEN_CALLER)
LOCK_RUN_SQLITE = _LOCK_RUN.format(head_refs=_HEAD_REFS_SQLITE, **GIVEN_CALLER)
# The same lock for a caller the statement authenticates itself (an agent token by its hash, or a
# caller already known: `CALLER`), as the agent's records take it: who called, then the locked
# row. No row: the caller is not authenticated; a row without a run: not found. SQLite locks the
# database for the transaction's writes, so its form is the agent checkpoint's read.
LOCK_RUN_AS_WHO_PG = f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at, locked.*
  FROM ({CALLER}) who
  LEFT JOIN LATERAL ({_lock_run_pg(**WHO_CALLER)}
  ) locked ON true"""
LOCK_RUN_AS_WHO_COUNTED_PG = counted_pg(LOCK_RUN_AS_WHO_PG, last_column="locked.*")

# --- Write a checkpoint ----------------------------------------------------------------------------
# The blobs it needs that are new, the notes a compaction pass archives (their blobs go with the
# others), its row, the key that made it, the run's heartbeat, and the mission's head moved to it
# with the save state's bookkeeping. `new_bytes` counts the state's blobs this statement stored.
# The checkpoint's reference maps that may be new are stored as blobs are (checkpoints.refmaps).
# Everything hangs off `claimed`, the row the checkpoint gets its id from: under the mission's row
# lock (the locked path) it is simply the next id; on the agent's fast path it is the mission row
# the compare-and-set claimed, so that nothing is written when the mission moved meanwhile.
# `{archive}`: the notes a compaction pass archives (`_ARCHIVE`; the one-trip form has none).
_ARCHIVE = """, archived AS (
    UPDATE checkpoints_record
       SET blob_id = moved.blob_id, text = moved.preview, size_bytes = moved.size_bytes, archived = TRUE
      FROM unnest(CAST(%(archived_ids)s AS bigint[]), CAST(%(archived_blobs)s AS text[]), CAST(%(archived_previews)s AS text[]),
                  CAST(%(archived_sizes)s AS integer[])) AS moved(id, blob_id, preview, size_bytes)
     WHERE checkpoints_record.id = moved.id AND EXISTS (SELECT 1 FROM claimed)
)"""
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
), mapped AS (
    INSERT INTO checkpoints_refmap (sha256, refs)
    SELECT sent.sha, sent.refs FROM unnest(CAST(%(map_shas)s AS text[]), CAST(%(map_refs)s AS jsonb[])) AS sent(sha, refs)
     WHERE EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT DO NOTHING
){archive}, made AS (
    INSERT INTO checkpoints_checkpoint (
        id, created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, parent_id, seq, trigger,
        hash, verified, verified_at, note, state_map_id, agent_map_id, agent_delta, record_watermark, size_bytes,
        agent_state_bytes, new_bytes, report_id)
    SELECT
        claimed.id, %(now)s, 'working', NULL, NULL, CAST(%(mission_id)s AS bigint), CAST(%(run_id)s AS bigint),
        CAST(%(parent_id)s AS bigint), CAST(%(seq)s AS integer), CAST(%(trigger)s AS text),
        CAST(%(hash)s AS text), false, NULL, CAST(%(note)s AS text), CAST(%(state_map_id)s AS text), CAST(%(agent_map_id)s AS text),
        CAST(%(agent_delta)s AS jsonb),
        CAST(%(record_watermark)s AS bigint), CAST(%(size_bytes)s AS bigint), CAST(%(agent_state_bytes)s AS bigint),
        (SELECT COALESCE(SUM(size_bytes), 0) FROM stored WHERE sha256 = ANY(CAST(%(counted)s AS text[]))),
        CAST(%(report_id)s AS text)
      FROM claimed
    RETURNING id, new_bytes
), remembered AS (
    INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(key_owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, made.id, %(now)s
      FROM made
     WHERE CAST(%(key)s AS text) IS NOT NULL
){move}
{answer}"""
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
    archive=_ARCHIVE,
    answer="SELECT id, new_bytes, NULL AS mission_after FROM made",
)

# --- The agent's checkpoint in two round trips -------------------------------------------------------
# Round trip 1, in autocommit, locking nothing: who is calling (an agent token by its hash: valid,
# not revoked, its user active, and the one mission it may be limited to; or a signed-in user as
# given), the run and its mission as the caller may see them, the head's agent-state refs (and
# their base and delta, for the new checkpoint's layout), what
# the idempotency key already made, a fingerprint of the whole mission row as read, and the id the
# checkpoint will have. No row: the caller is not authenticated; a row without a run: not found.
_CHECKPOINT_READ = f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at,
       {RUN_COLUMNS}, {MISSION_COLUMNS},
       {_HEAD_SEEN_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash{{extra}}
  FROM ({CALLER}) who
  LEFT JOIN (quests_run r JOIN quests_mission m ON m.id = r.mission_id)
         ON r.id = %(run_id)s
        AND m.owner_id = who.user_id
        AND (who.token_mission_id IS NULL OR m.id = who.token_mission_id)
  {_HEAD_SEEN_JOIN}
  {EARLIER_KEY_JOIN}"""
CHECKPOINT_READ_PG = _CHECKPOINT_READ.format(
    head_refs=_HEAD_REFS_PG,
    extra=""",
       md5(CAST(m AS text)) AS mission_seen,
       CASE WHEN r.id IS NOT NULL THEN nextval('checkpoints_checkpoint_id_seq') END AS checkpoint_id""",
)


CHECKPOINT_READ_COUNTED_PG = counted_pg(CHECKPOINT_READ_PG, last_column="AS checkpoint_id")
# SQLite writes under its database lock (the locked path): nothing to fingerprint or allocate.
CHECKPOINT_READ_SQLITE = _CHECKPOINT_READ.format(head_refs=_HEAD_REFS_SQLITE, extra=", NULL AS mission_seen, NULL AS checkpoint_id")

# Round trip 2, in autocommit (one statement is one transaction): the checkpoint written only if
# the mission row is still the one read (same fingerprint, and the run still its active run). The
# compare-and-set is the mission's update itself: it moves the head to the pre-allocated id and
# locks the row to the end of the statement, so a concurrent writer either went before (then
# nothing matches here, and the caller takes the locked path) or waits. It takes the blob
# writers' shared lock first (`guard`): every insert hangs off `claimed`, so none runs before it.
# The token's last use is noted here when a minute has passed since the last one.
_CLAIMED_ANSWER = "SELECT made.id, made.new_bytes, (SELECT mission_after FROM claimed) AS mission_after FROM made"
CHECKPOINT_CLAIMED_WRITE_PG = _CHECKPOINT_WRITE.format(
    claim=f"""guard AS (
    SELECT pg_advisory_xact_lock_shared(%(blob_gc_lock)s)
), claimed AS (
    {_CHECKPOINT_MISSION_MOVED.format(head="%(checkpoint_id)s")}
      FROM guard
     WHERE quests_mission.id = %(mission_id)s
       AND quests_mission.active_run_id = %(run_id)s
       AND md5(CAST(quests_mission AS text)) = %(mission_seen)s
    RETURNING CAST(%(checkpoint_id)s AS bigint) AS id, md5(CAST(quests_mission AS text)) AS mission_after
), token_used AS (
    UPDATE quests_agenttoken SET last_used_at = %(now)s WHERE id = %(used_token_id)s
)""",
    archive=_ARCHIVE,
    move="",
    answer=_CLAIMED_ANSWER,
)

# --- The agent's checkpoint in one round trip --------------------------------------------------------
# When this process wrote the run's last checkpoint itself (`engine.checkpoints.Known`: the mission
# row as that write left it, by its fingerprint), the read is not needed: one autocommit statement
# authenticates the caller (in the counted form it also counts the request, and claims only within
# the rate), looks the key up, and claims the mission row as the claimed write does, allocating the
# checkpoint's id as it moves the head. It claims nothing when the row moved, when the key made
# something already, or when the caller may not write there: the caller then reads and writes as
# above. No row: the token is not valid. `{counted}` and `{within_rate}`: the counted form's parts.
# Its whitespace is collapsed (`compact`): psycopg parses a statement once only up to 4,096 bytes.
_CHECKPOINT_KNOWN_WRITE = _CHECKPOINT_WRITE.format(
    claim="""who AS (
    {who}
){counted}, guard AS (
    SELECT pg_advisory_xact_lock_shared(%(blob_gc_lock)s)
), claimed AS (
    """
    + _CHECKPOINT_MISSION_MOVED.format(head="nextval('checkpoints_checkpoint_id_seq')")
    + """
      FROM guard, who
     WHERE quests_mission.id = %(mission_id)s
       AND quests_mission.active_run_id = %(run_id)s
       AND md5(CAST(quests_mission AS text)) = %(mission_seen)s
       AND quests_mission.owner_id = who.user_id
       AND (who.token_mission_id IS NULL OR quests_mission.id = who.token_mission_id)
       AND NOT EXISTS (SELECT FROM quests_idempotentrequest earlier
                        WHERE earlier.owner_id = quests_mission.owner_id
                          AND earlier.scope = 'm' || quests_mission.id || ':' || %(key_suffix)s
                          AND earlier.key = %(key)s){within_rate}
    RETURNING quests_mission.head_checkpoint_id AS id, md5(CAST(quests_mission AS text)) AS mission_after
), token_used AS (
    UPDATE quests_agenttoken SET last_used_at = %(now)s WHERE id = %(used_token_id)s AND EXISTS (SELECT FROM claimed)
)""",
    archive="",
    move="",
    answer="""SELECT made.id, made.new_bytes, (SELECT mission_after FROM claimed) AS mission_after{api_count}
  FROM who LEFT JOIN made ON TRUE""",
)
CHECKPOINT_KNOWN_WRITE_PG = compact(
    _CHECKPOINT_KNOWN_WRITE.replace("{who}", CALLER).replace("{counted}", "").replace("{within_rate}", "").replace("{api_count}", "")
)
# The counted form (an agent token's only): the count's row is the valid token's, from `who`
# (`{count}`: the cache's upsert of KNOWN_COUNTED_ROW_PG).
CHECKPOINT_KNOWN_WRITE_COUNTED_PG = compact(
    _CHECKPOINT_KNOWN_WRITE.replace("{who}", TOKEN_CALLER)
    .replace("{counted}", ", counted AS (\n    {count}\n)")
    .replace("{within_rate}", "\n       AND CAST((SELECT value FROM counted) AS integer) <= %(rate)s")
    .replace("{api_count}", ",\n       (SELECT value FROM counted) AS api_count")
)
KNOWN_COUNTED_ROW_PG = "SELECT %(count_key)s, '1', %(count_expires)s FROM who WHERE who.token_id IS NOT NULL"

CHECKPOINT_WRITE_SQLITE = (
    "UPDATE quests_run SET heartbeat_at = %(now)s WHERE id = %(beat_run_id)s",
    # once per blob; the row count says whether it was new
    """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
       VALUES (%(sha)s, %(data)s, length(%(data)s), %(media_type)s, %(now)s, 'working', NULL, NULL)
       ON CONFLICT DO NOTHING""",
    # once per map
    "INSERT INTO checkpoints_refmap (sha256, refs) VALUES (%(sha)s, %(refs)s) ON CONFLICT DO NOTHING",
    # once per archived note
    """UPDATE checkpoints_record SET blob_id = %(blob_id)s, text = %(preview)s, size_bytes = %(size_bytes)s, archived = TRUE
        WHERE id = %(id)s""",
    """INSERT INTO checkpoints_checkpoint (
        created_at, retention_class, retention_approved_at, expires_at, mission_id, run_id, parent_id, seq, trigger,
        hash, verified, verified_at, note, state_map_id, agent_map_id, agent_delta, record_watermark, size_bytes,
        agent_state_bytes, new_bytes, report_id)
       VALUES (
        %(now)s, 'working', NULL, NULL, %(mission_id)s, %(run_id)s, %(parent_id)s, %(seq)s, %(trigger)s,
        %(hash)s, FALSE, NULL, %(note)s, %(state_map_id)s, %(agent_map_id)s, %(agent_delta)s, %(record_watermark)s, %(size_bytes)s,
        %(agent_state_bytes)s, %(new_bytes)s, %(report_id)s)
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

# The same beat for a caller the statement authenticates itself (`CALLER`): who called, then the
# run as the caller may see it (NULLs: not found) and whether it beat. No row: the caller is not
# authenticated. SQLite reads who called with the agent checkpoint's read, then beats as above.
HEARTBEAT_AS_WHO_PG = f"""
WITH who AS ({CALLER}
), beat AS (
    UPDATE quests_run SET heartbeat_at = %(now)s
     WHERE id = %(run_id)s AND ended_at IS NULL
       AND mission_id IN (SELECT m.id FROM quests_mission m JOIN who ON m.owner_id = who.user_id
                           WHERE who.token_mission_id IS NULL OR m.id = who.token_mission_id)
    RETURNING id
)
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at,
       {RUN_COLUMNS}, EXISTS (SELECT 1 FROM beat) AS beaten
  FROM who
  LEFT JOIN (quests_run r JOIN quests_mission m ON m.id = r.mission_id)
         ON r.id = %(run_id)s AND m.owner_id = who.user_id
        AND (who.token_mission_id IS NULL OR m.id = who.token_mission_id)"""
HEARTBEAT_AS_WHO_COUNTED_PG = counted_pg(HEARTBEAT_AS_WHO_PG, last_column="AS beaten")

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
# On PostgreSQL the statement also reads the window of the new record's section as it was before
# the insert (a statement sees the rows as they were when it started), newest first, as JSON; the
# service adds the new record to it (`section_reads.record_rows_after`) and makes the section without
# reading again. A record that resolves another touches every record section: it reads them apart
# (`with_section` false).
_RECORD_WINDOW_PG = """SELECT id, kind, text, data, blob_id, size_bytes FROM checkpoints_record
     WHERE mission_id = %(mission_id)s AND kind = %(kind)s AND NOT resolved AND NOT abandoned
       AND NOT (archived AND %(unarchived_only)s) AND %(with_section)s
     ORDER BY id DESC
     LIMIT %(window)s"""
RECORD_WRITE_PG = f"""
WITH beat AS (
    {_RECORD_BEAT}
), stored AS (
    {_RECORD_BLOB.format(bytes="bytea")}
), resolution AS (
    {_RECORD_RESOLVES}
    RETURNING id
), made AS (
    {_RECORD_INSERT.format(json="jsonb")}, CAST(data AS text)
), window_before AS (
    {_RECORD_WINDOW_PG}
)
SELECT made.id, (SELECT count(*) FROM resolution), made.data,
       (SELECT CAST(coalesce(json_agg(w ORDER BY w.id DESC), '[]') AS text) FROM window_before AS w)
  FROM made"""
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
SAVE_STATE = """UPDATE quests_mission
       SET state_version = %(state_version)s, state_refs = CAST(%(state_refs)s AS {json}),
           state_pending = CAST(%(state_pending)s AS {json}), state_report = CAST(%(state_report)s AS {json})
     WHERE id = %(mission_id)s"""
ASK_SNAPSHOT = """INSERT INTO checkpoints_snapshotrequest (
        mission_id, status, requested_at, not_before, claimed_at, claim_token, attempts, enqueued_at, completed_at,
        checkpoint_id, outcome)
    VALUES (%(mission_id)s, 'pending', %(now)s, %(not_before)s, NULL, '', 0, NULL, NULL, NULL, '')
    ON CONFLICT DO NOTHING
    RETURNING id"""
# The parts' contents are sent in binary (`%(part_data)b`): as text, psycopg writes each as hex and
# escapes it into the array literal with a regular expression, a cost per byte (a receipt's ledger
# chunk of ~25 operations: 0.11 ms of the call, bench/profile_ledger.py's cProfile; binary: none).
STORE_PARTS_PG = """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    SELECT part.sha, part.data, length(part.data), 'application/json', %(now)s, 'working', NULL, NULL
      FROM unnest(CAST(%(part_shas)s AS text[]), CAST(%(part_data)b AS bytea[])) AS part(sha, data)
    ON CONFLICT DO NOTHING"""
STORE_PART_SQLITE = """INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class, retention_approved_at, expires_at)
    VALUES (%(sha)s, %(data)s, length(%(data)s), 'application/json', %(now)s, 'working', NULL, NULL)
    ON CONFLICT DO NOTHING"""
STATE_SAVE_PG = f"""
WITH resolver AS (
    {_RESOLVED_BY}
), remembered AS (
    {_REMEMBER_KEY}
), stored AS (
    {STORE_PARTS_PG}
), saved AS (
    {SAVE_STATE.format(json="jsonb")}
), requested AS (
    {ASK_SNAPSHOT}
)
SELECT id FROM requested"""
STATE_SAVE_SQLITE = (
    _RESOLVED_BY,
    _REMEMBER_KEY,
    STORE_PART_SQLITE,  # once per part
    SAVE_STATE.format(json="text"),
    ASK_SNAPSHOT,
)
