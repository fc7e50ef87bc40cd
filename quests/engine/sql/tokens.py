"""An agent token: who calls, by the token's hash (every agent request but the checkpoint, whose
first statement authenticates it: `runs.CHECKPOINT_READ_PG`)."""

# Every agent request but the checkpoint (which authenticates in its own first statement) starts
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
