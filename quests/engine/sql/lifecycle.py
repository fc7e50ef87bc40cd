"""A mission's lifecycle: its creation (with its constraints, audit events and key), a run's start
and a run's end."""

from quests.engine.sql.runs import EARLIER_KEY_JOIN, MISSION_COLUMNS

# --- Start a run --------------------------------------------------------------------------------------
# The mission locked, with what the key already made (as for a run's writes).
_LOCK_MISSION = f"""
SELECT {MISSION_COLUMNS},
       earlier.object_id AS replay_object_id, earlier.request_hash AS replay_request_hash
  FROM quests_mission m
  {EARLIER_KEY_JOIN}
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
AUDIT_EVENT = """INSERT INTO quests_auditevent (
        created_at, mission_id, actor_user_id, actor_token_id, actor, entity, entity_id, action, from_state, to_state, data)
    VALUES (%(now)s, %(mission_id)s, %(actor_user_id)s, %(actor_token_id)s, %(actor)s, %(entity)s,
        COALESCE(CAST(%(entity_id)s AS bigint), {new}), %(action)s, %(from_state)s, %(to_state)s, CAST(%(data)s AS {json}))"""
_RUN_KEY = """INSERT INTO quests_idempotentrequest (owner_id, scope, key, request_hash, object_id, created_at)
    SELECT %(key_owner_id)s, %(key_scope)s, CAST(%(key)s AS text), %(request_hash)s, {new}, %(now)s
     WHERE CAST(%(key)s AS text) IS NOT NULL"""
AUDIT_EVENTS_PG = """INSERT INTO quests_auditevent (
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
    {AUDIT_EVENTS_PG.format(new=_NEW_RUN_PG)}
), remembered AS (
    {_RUN_KEY.format(new=_NEW_RUN_PG)}
)
SELECT id FROM started"""
RUN_START_SQLITE = (
    _RUN_INSERT,
    _RUN_MISSION_MOVED.format(new="%(run_id)s"),
    AUDIT_EVENT.format(new="%(run_id)s", json="text"),  # once per event
    _RUN_KEY.format(new="%(run_id)s"),
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
        1, 0, 0, NULL, CAST(%(state_refs)s AS {json}), CAST(%(state_pending)s AS {json}), CAST(%(state_report)s AS {json}),
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
    AUDIT_EVENT.format(new="%(mission_id)s", json="text"),  # once per event
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
    {AUDIT_EVENTS_PG.format(new="NULL")}
)
SELECT 1"""
RUN_END_SQLITE = (_RUN_ENDED, _MISSION_STOPPED, AUDIT_EVENT.format(new="NULL", json="text"))  # the event once per event

# --- A mission's working state gets its expiry ---------------------------------------------------------
# Once a mission has ended (or its owner chose to keep its history), every row of its working state
# (`quests.retention.services.expiry.WORKING_STATE`) carries the mission's expiry: one statement, one
# commit. The mission's row is locked first, as every writer locks it before it touches the mission's
# rows: each UPDATE joins `mission`, so no row is changed before that lock is held, and a writer
# still at work on the mission is waited for rather than deadlocked with.
_STAMP_WORKING = """UPDATE {table} AS t SET expires_at = mission.expires_at, retention_approved_at = mission.retention_approved_at
      FROM {source} WHERE {join} AND t.retention_class = 'working'"""
STAMP_WORKING_TABLES = (
    "checkpoints_checkpoint",
    "checkpoints_record",
    "checkpoints_operation",
    "quests_constraint",
    "quests_approval",
    "quests_milestone",
    "quests_memoryproposal",
)
_STAMPED = [(table, _STAMP_WORKING.format(table=table, source="mission", join="t.mission_id = mission.id")) for table in STAMP_WORKING_TABLES] + [
    (
        "checkpoints_operationevent",
        _STAMP_WORKING.format(
            table="checkpoints_operationevent", source="mission JOIN checkpoints_operation AS o ON o.mission_id = mission.id", join="t.operation_id = o.id"
        ),
    )
]
STAMP_WORKING_STATE_PG = (
    "WITH mission AS (\n    SELECT id, expires_at, retention_approved_at FROM quests_mission WHERE id = %(mission_id)s FOR UPDATE\n)"
    + "".join(f", stamped_{table} AS (\n    {update}\n)" for table, update in _STAMPED)
    + "\nSELECT count(*) FROM mission"
)
