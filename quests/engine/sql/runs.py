"""A run's writes: the lock of its mission, the heartbeat, a record, and the save state after a change,
with the columns and fragments the agent's checkpoint (`checkpoints`) reads a run by. (A run's start
is a mission's lifecycle: `lifecycle`.)"""

from quests.engine.sql.refmaps import AGENT_BASE_JOIN, AGENT_REFS_PG, AGENT_REFS_SQLITE
from quests.engine.sql.tokens import CALLER, GIVEN_CALLER, WHO_CALLER, counted_pg, named_as_who

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
# stored (the new checkpoint's delta goes on the same base) and their size (a system checkpoint
# carries them over without reading the head again), as a run's lock and the agent's checkpoint read them: the columns (`{head_refs}`: the dialect's refs expression) and the joins.
HEAD_SEEN_COLUMNS = """head.id AS head_seen_id, {head_refs} AS head_seen_parts,
       head.agent_map_id AS head_seen_base, head.agent_delta AS head_seen_delta,
       head.agent_state_bytes AS head_seen_size"""
HEAD_SEEN_JOIN = f"""LEFT JOIN checkpoints_checkpoint head ON head.id = m.head_checkpoint_id
  {AGENT_BASE_JOIN.format(checkpoint="head", base="head_base")}"""
HEAD_REFS_PG = AGENT_REFS_PG.format(checkpoint="head", base="head_base")
HEAD_REFS_SQLITE = AGENT_REFS_SQLITE.format(checkpoint="head", base="head_base")

# --- Lock a run's mission -------------------------------------------------------------------------
# The run, its mission locked, and what the write needs to know before it writes: what the
# idempotency key already made (under the mission owner's account, in the mission's scope), and
# the head checkpoint's agent-state refs (so unchanged parts are not sent again) with how they are
# stored (the new checkpoint's delta goes on the same base). The caller sees only its own
# missions, and only its token's mission when the token is limited to one.
_LOCK_RUN = f"""
SELECT {RUN_COLUMNS}, {MISSION_COLUMNS},
       {HEAD_SEEN_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash
  FROM quests_run r
  JOIN quests_mission m ON m.id = r.mission_id
  {HEAD_SEEN_JOIN}
  {EARLIER_KEY_JOIN}
 WHERE r.id = %(run_id)s
   AND m.owner_id = {{owner}}
   AND ({{token_mission}} IS NULL OR m.id = {{token_mission}})"""


def _lock_run_pg(**caller: str) -> str:
    # Blob writers share an advisory lock that the blob collector takes alone (checkpoints.pruning).
    return (
        _LOCK_RUN.format(head_refs=HEAD_REFS_PG, **caller).replace(
            "earlier.request_hash AS replay_request_hash",
            "earlier.request_hash AS replay_request_hash,\n       pg_advisory_xact_lock_shared(%(blob_gc_lock)s) AS blob_writers_guard",
        )
        + "\n   FOR UPDATE OF m"
    )


LOCK_RUN_PG = _lock_run_pg(**GIVEN_CALLER)
LOCK_RUN_SQLITE = _LOCK_RUN.format(head_refs=HEAD_REFS_SQLITE, **GIVEN_CALLER)
# The same lock for a caller the statement authenticates itself (`named_as_who`), as the agent's
# records take it: who called, then the locked row (NULLs: the caller may not see the run).
LOCK_RUN_AS_WHO_PG = named_as_who(_lock_run_pg(**WHO_CALLER))
LOCK_RUN_AS_WHO_COUNTED_PG = counted_pg(LOCK_RUN_AS_WHO_PG, last_column="AS token_prefix")

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
# authenticated. SQLite reads who called first (`WHO_NAMED`), then beats as above.
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
