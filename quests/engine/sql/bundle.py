"""The resume bundle: everything the next run needs, read in one statement."""

from checkpoints.models import DURABLE_RECORD_KINDS
from quests.engine.sql.refmaps import AGENT_BASE_JOIN, AGENT_REFS_PG, AGENT_REFS_SQLITE

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
# the bundle says where those references live (the head's base map, aliased `head_base`, joined to
# the checkpoint row, aliased `head`, with the checkpoint's delta laid over it: checkpoints.refmaps).
AGENT_STATE_BASE_JOIN = AGENT_BASE_JOIN.format(checkpoint="head", base="head_base")
AGENT_STATE_REFS_PG = AGENT_REFS_PG.format(checkpoint="head", base="head_base")
AGENT_STATE_REFS_SQLITE = AGENT_REFS_SQLITE.format(checkpoint="head", base="head_base")

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
  {AGENT_STATE_BASE_JOIN}
 CROSS JOIN LATERAL jsonb_each_text({AGENT_STATE_REFS_PG}) WITH ORDINALITY AS ref(key, sha, n)
  JOIN checkpoints_blob b ON b.sha256 = ref.sha
 WHERE head.id = {_THIS_MISSION.format(column="head_checkpoint_id")}"""
HEAD_AGENT_STATE_SQLITE = f"""
SELECT ref.key, b.data
  FROM checkpoints_checkpoint head
  {AGENT_STATE_BASE_JOIN}
  JOIN json_each({AGENT_STATE_REFS_SQLITE}) ref
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
