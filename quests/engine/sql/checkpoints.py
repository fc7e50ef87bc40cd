"""The agent's checkpoint: its write under the mission's row lock, in two round trips (an autocommit
read that authenticates the caller, then a compare-and-set write), and in one (`Known`: the mission
as this process's last claimed write left it). Split from `runs`, whose lock, columns and head
fragments it reads a run by."""

from quests.engine.sql import compact
from quests.engine.sql.runs import (
    EARLIER_KEY_JOIN,
    HEAD_REFS_PG,
    HEAD_REFS_SQLITE,
    HEAD_SEEN_COLUMNS,
    HEAD_SEEN_JOIN,
    MISSION_COLUMNS,
    RUN_COLUMNS,
)
from quests.engine.sql.tokens import CALLER, TOKEN_CALLER, counted_pg

# --- Write a checkpoint ----------------------------------------------------------------------------
# The blobs it needs that are new, the notes a compaction pass archives (their blobs go with the
# others), its row, the key that made it, the run's heartbeat, and the mission's head moved to it
# with the save state's bookkeeping. `new_bytes` counts the state's blobs this statement stored.
# The checkpoint's reference maps that may be new are stored as blobs are (checkpoints.refmaps).
# Everything hangs off `claimed`, the row the checkpoint gets its id from: under the mission's row
# lock (the locked path) it is simply the next id; on the agent's fast path it is the mission row
# the compare-and-set claimed, so that nothing is written when the mission moved meanwhile.
# `{archive}`: the notes a compaction pass archives (`_ARCHIVE`; the one-trip form has none).
# The blobs' contents and the maps' JSON are sent in binary (`%(blob_data)b`, `%(map_refs)b`), as
# `runs.STORE_PARTS_PG` says why.
# A new row's retention approval, expiry and verification time are NULL: left out, as the columns'
# default (the one-trip forms must stay under psycopg's 4,096 bytes).
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
    INSERT INTO "checkpoints_blob" (sha256, data, size_bytes, media_type, created_at, retention_class)
    SELECT sent.sha, sent.data, length(sent.data), sent.media_type, %(now)s, 'working'
      FROM unnest(CAST(%(blob_shas)s AS text[]), CAST(%(blob_data)b AS bytea[]), CAST(%(blob_media)s AS text[])) AS sent(sha, data, media_type)
     WHERE EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT DO NOTHING
    RETURNING sha256, size_bytes
), mapped AS (
    INSERT INTO checkpoints_refmap (sha256, refs)
    SELECT sent.sha, CAST(sent.refs AS jsonb) FROM unnest(CAST(%(map_shas)s AS text[]), CAST(%(map_refs)b AS text[])) AS sent(sha, refs)
     WHERE EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT DO NOTHING
){archive}, made AS (
    INSERT INTO checkpoints_checkpoint (
        id, created_at, retention_class, mission_id, run_id, parent_id, seq, trigger,
        hash, verified, note, state_map_id, agent_map_id, agent_delta, record_watermark, size_bytes,
        agent_state_bytes, new_bytes, report_id)
    SELECT
        claimed.id, %(now)s, 'working', CAST(%(mission_id)s AS bigint), CAST(%(run_id)s AS bigint),
        CAST(%(parent_id)s AS bigint), CAST(%(seq)s AS integer), CAST(%(trigger)s AS text),
        CAST(%(hash)s AS text), false, CAST(%(note)s AS text), CAST(%(state_map_id)s AS text), CAST(%(agent_map_id)s AS text),
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
       {HEAD_SEEN_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash{{extra}}
  FROM ({CALLER}) who
  LEFT JOIN (quests_run r JOIN quests_mission m ON m.id = r.mission_id)
         ON r.id = %(run_id)s
        AND m.owner_id = who.user_id
        AND (who.token_mission_id IS NULL OR m.id = who.token_mission_id)
  {HEAD_SEEN_JOIN}
  {EARLIER_KEY_JOIN}"""
CHECKPOINT_READ_PG = _CHECKPOINT_READ.format(
    head_refs=HEAD_REFS_PG,
    extra=""",
       md5(CAST(m AS text)) AS mission_seen,
       CASE WHEN r.id IS NOT NULL THEN nextval('checkpoints_checkpoint_id_seq') END AS checkpoint_id""",
)


CHECKPOINT_READ_COUNTED_PG = counted_pg(CHECKPOINT_READ_PG, last_column="AS checkpoint_id")
# SQLite writes under its database lock (the locked path): nothing to fingerprint or allocate.
CHECKPOINT_READ_SQLITE = _CHECKPOINT_READ.format(head_refs=HEAD_REFS_SQLITE, extra=", NULL AS mission_seen, NULL AS checkpoint_id")

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
CHECKPOINT_KNOWN_TEMPLATE = _CHECKPOINT_WRITE.format(
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


def known_forms(template: str) -> tuple[str, str]:
    """A one-trip write's two forms, from its `template` (`CHECKPOINT_KNOWN_TEMPLATE`, or that
    with more: the LangGraph put's): as given, and counted (an agent token's only), where the count's row is the valid
    token's, from `who` (`{count}`: the cache's upsert of KNOWN_COUNTED_ROW_PG)."""
    plain = template.replace("{who}", CALLER).replace("{counted}", "").replace("{within_rate}", "").replace("{api_count}", "")
    counted = (
        template.replace("{who}", TOKEN_CALLER)
        .replace("{counted}", ", counted AS (\n    {count}\n)")
        .replace("{within_rate}", "\n       AND CAST((SELECT value FROM counted) AS integer) <= %(rate)s")
        .replace("{api_count}", ",\n       (SELECT value FROM counted) AS api_count")
    )
    return compact(plain), compact(counted)


CHECKPOINT_KNOWN_WRITE_PG, CHECKPOINT_KNOWN_WRITE_COUNTED_PG = known_forms(CHECKPOINT_KNOWN_TEMPLATE)
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
