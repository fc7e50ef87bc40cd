"""An agent token: who calls, by the token's hash. Most agent requests read it first (`AGENT_TOKEN`);
the hottest calls start their own first statement with it (`CALLER`: the agent's checkpoint, the
lock of an operation call or a record, the heartbeat, LangGraph's put, put_writes and get_tuple)."""

# Every agent request but the hottest (which authenticate in their own first statement) starts
# here: the token by its hash, not revoked, with its user, each in its model's field order.
TOKEN_COLUMNS = "t.id, t.user_id, t.mission_id, t.name, t.token_hash, t.prefix, t.created_at, t.last_used_at, t.revoked_at"
USER_COLUMNS = "u.id, u.password, u.last_login, u.is_superuser, u.username, u.first_name, u.last_name, u.email, u.is_staff, u.is_active, u.date_joined"
AGENT_TOKEN = f"""
SELECT {TOKEN_COLUMNS}, {USER_COLUMNS}
  FROM quests_agenttoken t JOIN auth_user u ON u.id = t.user_id
 WHERE t.token_hash = %(token_hash)s AND t.revoked_at IS NULL"""
# The same, counting the request against the token's rate in the database's cache when the token
# is valid (`{count}`: the cache's upsert, given the row of a valid token, config.cache): one round
# trip for both. The count comes last (NULL: nothing counted).
AGENT_TOKEN_COUNTED_PG = f"""
WITH found AS ({AGENT_TOKEN}
), counted AS (
    {{count}}
)
SELECT found.*, (SELECT value FROM counted) AS api_count FROM found"""
COUNTED_TOKEN_ROW_PG = "SELECT %(count_key)s, '1', %(count_expires)s FROM found WHERE found.is_active"

# --- Who calls, inside a statement of the engine's own -------------------------------------------
# The first part of a statement that authenticates its caller itself: an agent token by its hash
# (valid, not revoked, its user active, and the one mission it may be limited to), or a caller
# already known (a signed-in user as given). No row: the token is not valid. `TOKEN_CALLER`: the
# token's part alone.
TOKEN_CALLER = """SELECT t.user_id, t.id AS token_id, t.mission_id AS token_mission_id, t.last_used_at
          FROM quests_agenttoken t JOIN auth_user u ON u.id = t.user_id
         WHERE t.token_hash = CAST(%(token_hash)s AS text) AND t.revoked_at IS NULL AND u.is_active"""
CALLER = (
    TOKEN_CALLER
    + """
        UNION ALL
        SELECT CAST(%(user_id)s AS integer), NULL, CAST(%(token_mission_id)s AS bigint), NULL
         WHERE CAST(%(token_hash)s AS text) IS NULL"""
)
# A valid token's row for the cache's count (`counted_pg`).
COUNTED_CALLER_ROW_PG = f"SELECT %(count_key)s, '1', %(count_expires)s FROM ({CALLER}) valid WHERE valid.token_id IS NOT NULL"


def counted_pg(statement: str, *, last_column: str) -> str:
    """`statement`, which starts with who is calling (`CALLER`), also counting the request of a
    valid agent token against its rate in the database's cache (as AGENT_TOKEN_COUNTED_PG does;
    `{count}`: the cache's upsert of COUNTED_CALLER_ROW_PG): the count is a column added after
    its last one, `last_column`."""
    assert statement.count(last_column) == 1, last_column
    body = statement.replace(last_column, last_column + ",\n       (SELECT value FROM counted) AS api_count").strip()
    counted = "WITH counted AS (\n    {count}\n)"
    return counted + (", " + body.removeprefix("WITH ") if body.startswith("WITH ") else "\n" + body)


# How a statement names its caller where it checks what the caller may see: as given (`Caller`'s
# parameters) or as the statement's `who` found it.
GIVEN_CALLER = {"owner": "%(user_id)s", "token_mission": "CAST(%(token_mission_id)s AS bigint)"}
WHO_CALLER = {"owner": "who.user_id", "token_mission": "who.token_mission_id"}
# Who is calling with the token's name and prefix (the audit events' actor): the first read of a
# call that authenticates its caller itself, on SQLite (PostgreSQL: `named_as_who`).
_TOKEN_NAMES = "tk.name AS token_name, tk.prefix AS token_prefix"
WHO_NAMED = f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at, {_TOKEN_NAMES}
  FROM ({CALLER}) who
  LEFT JOIN quests_agenttoken tk ON tk.id = who.token_id"""


def named_as_who(lock: str) -> str:
    """`lock` (a statement of at most one row, locking it, that names its caller with WHO_CALLER)
    for a caller the statement authenticates itself: who called, then the locked row (NULLs when
    the caller may not see it), then the token's name and prefix."""
    return f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at, locked.*, {_TOKEN_NAMES}
  FROM ({CALLER}) who
  LEFT JOIN quests_agenttoken tk ON tk.id = who.token_id
  LEFT JOIN LATERAL ({lock}
  ) locked ON true"""
