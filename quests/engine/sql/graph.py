"""The LangGraph saver's server side: put (a LangGraph checkpoint in one round trip or two), put_writes
(pending writes) and get_tuple (a thread's checkpoint with its writes)."""

from quests.engine.sql import compact
from quests.engine.sql.checkpoints import CHECKPOINT_CLAIMED_WRITE_PG, CHECKPOINT_KNOWN_TEMPLATE, known_forms
from quests.engine.sql.runs import HEAD_REFS_PG, HEAD_SEEN_COLUMNS, HEAD_SEEN_JOIN, MISSION_COLUMNS, RUN_COLUMNS
from quests.engine.sql.tokens import CALLER, counted_pg

# How put_writes' and get_tuple's caller is named: by the statement's own `who` (PostgreSQL, where
# it starts with CALLER) or as given (SQLite's steps, for a caller authenticated before).
_AS_WHO = {"who": "who, ", "user_id": "who.user_id", "token_mission_id": "who.token_mission_id"}
_AS_GIVEN = {"who": "", "user_id": "%(user_id)s", "token_mission_id": "CAST(%(token_mission_id)s AS bigint)"}

# --- The LangGraph saver's put, in two round trips ------------------------------------------------
# Round trip 1, in autocommit, locking nothing: who is calling (as the agent's checkpoint reads it:
# an agent token by its hash, or a signed-in user as given), then the caller's live thread, its
# mission and the mission's active run (the session run), read as the agent's checkpoint reads a
# run (`CHECKPOINT_READ_PG`: the run, the mission, the head's agent-state refs, no key), whether the
# checkpoint is saved already, the parent's channel map (unchanged channels refer to its blobs), a
# fingerprint of the mission row, and the ids the Questlog checkpoint and the LangGraph row will
# have. No row: the caller is not authenticated. A row without a run (no such live thread, no
# run): the service takes the locked path, as it does a save already made, a stale session run,
# or a channel the parent does not hold.
GRAPH_PUT_READ_PG = f"""
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at,
       {RUN_COLUMNS}, {MISSION_COLUMNS},
       {HEAD_SEEN_COLUMNS.format(head_refs=HEAD_REFS_PG)},
       NULL AS replay_object_id, NULL AS replay_request_hash,
       md5(CAST(m AS text)) AS mission_seen,
       CASE WHEN r.id IS NOT NULL THEN nextval('checkpoints_checkpoint_id_seq') END AS checkpoint_id,
       CASE WHEN r.id IS NOT NULL THEN nextval('checkpoints_graphcheckpoint_id_seq') END AS graph_row_id,
       EXISTS (SELECT 1 FROM checkpoints_graphcheckpoint k
                WHERE k.mission_id = m.id AND k.ns = %(ns)s AND k.graph_id = %(graph_id)s) AS known,
       (SELECT p.channels FROM checkpoints_graphcheckpoint p
         WHERE p.mission_id = m.id AND p.ns = %(ns)s AND p.graph_id = %(parent_graph_id)s) AS parent_channels
  FROM ({CALLER}) who
  LEFT JOIN (quests_graphthread t
             JOIN quests_mission m ON m.id = t.mission_id
             JOIN quests_run r ON r.id = m.active_run_id)
         ON t.owner_id = who.user_id AND t.thread_id = %(thread_id)s AND t.deleted_at IS NULL
        AND m.owner_id = who.user_id
        AND (who.token_mission_id IS NULL OR m.id = who.token_mission_id)
  {HEAD_SEEN_JOIN}"""
GRAPH_PUT_READ_COUNTED_PG = counted_pg(GRAPH_PUT_READ_PG, last_column="AS parent_channels")


def _spliced(text: str, anchor: str, added: str) -> str:
    """`text` with `added` after its one `anchor` (a change to the agent's statement that moves the
    anchor fails here, at import, not in a request)."""
    return _replaced(text, anchor, anchor, anchor + added)


def _replaced(text: str, start: str, end: str, instead: str) -> str:
    """`text` with its one piece from `start` to `end` (both included) replaced by `instead`."""
    assert text.count(start) == 1 and text.count(end) == 1, (start, end)
    begins = text.index(start)
    ends = text.index(end, begins) + len(end)
    return text[:begins] + instead + text[ends:]


# The LangGraph row, written from the checkpoint the statement made (its retention approval and
# expiry are NULL, as for every new row); `{id}`: allocated by the read, or here.
_GRAPHED = """, graphed AS (
    INSERT INTO checkpoints_graphcheckpoint (id, created_at, retention_class, checkpoint_id,
        mission_id, ns, graph_id, parent_graph_id, skeleton, metadata, channels, run_ref)
    SELECT {id}, %(now)s, 'working', made.id, CAST(%(mission_id)s AS bigint), %(ns)s,
        %(graph_id)s, %(parent_graph_id)s, CAST(%(skeleton)s AS jsonb), CAST(%(metadata)s AS jsonb), CAST(%(graph_channels)s AS jsonb),
        %(run_ref)s FROM made
    RETURNING id
)"""
_THREAD_LIVE = "\n       AND EXISTS (SELECT FROM quests_graphthread t WHERE t.mission_id = quests_mission.id AND t.deleted_at IS NULL)"

# Round trip 2, in autocommit: the agent's claimed write (`CHECKPOINT_CLAIMED_WRITE_PG`: nothing is
# written unless the mission row is still as read), which also claims only while the thread is
# live, with the LangGraph row. Kept under psycopg's 4,096 bytes, past which it parses a
# statement again on every call (tests/test_engine.py checks every statement); compacted to stay so.
GRAPH_PUT_CLAIMED_WRITE_PG = compact(
    _spliced(
        _spliced(CHECKPOINT_CLAIMED_WRITE_PG, "AND md5(CAST(quests_mission AS text)) = %(mission_seen)s", _THREAD_LIVE),
        "WHERE CAST(%(key)s AS text) IS NOT NULL\n)",
        _GRAPHED.format(id="CAST(%(graph_row_id)s AS bigint)"),
    )
)

# --- The LangGraph saver's put, in one round trip --------------------------------------------------
# When this process saved the thread's last checkpoint itself and the put is its child (LangGraph's
# loop saves each step's checkpoint as the child of the one before), the read is not needed: the
# agent's one-trip write (`CHECKPOINT_KNOWN_TEMPLATE`: it authenticates, counts, and claims the
# mission row only if it is still as that save left it), which also claims only while the thread is
# live and the checkpoint is not saved already, writes the LangGraph row with an id of its own and
# answers it. A put has no idempotency key (a retried one answers the saved checkpoint), so the
# key's lookup and its row are not part of it. Claiming nothing, it writes nothing: the put then
# reads and writes in two trips.
_GRAPH_PUT_KNOWN = _replaced(
    _replaced(
        CHECKPOINT_KNOWN_TEMPLATE,
        "\n       AND NOT EXISTS (SELECT FROM quests_idempotentrequest earlier",
        "AND earlier.key = %(key)s)",
        _THREAD_LIVE
        + "\n       AND NOT EXISTS (SELECT FROM checkpoints_graphcheckpoint k"
        + " WHERE k.mission_id = quests_mission.id AND k.ns = %(ns)s AND k.graph_id = %(graph_id)s)",
    ),
    ", remembered AS (",
    "WHERE CAST(%(key)s AS text) IS NOT NULL\n)",
    _GRAPHED.format(id="nextval('checkpoints_graphcheckpoint_id_seq')"),
)
GRAPH_PUT_KNOWN_WRITE_PG, GRAPH_PUT_KNOWN_WRITE_COUNTED_PG = known_forms(
    _spliced(_GRAPH_PUT_KNOWN, "FROM claimed) AS mission_after", ", (SELECT id FROM graphed) AS graph_row_id")
)


# --- The LangGraph saver's put_writes ----------------------------------------------------------------
# A task's writes on a checkpoint of a live thread whose session run is going: the mission locked
# (writes of one thread queue behind each other), the writes kept (a special channel, at a negative
# index, replaces the one before it; an ordinary write keeps the first one sent for its task and
# index), the mission titled when it is still named after its thread, and the run's heartbeat.
# Nothing is written when the thread, its mission or a fresh session run is not there: the service
# then takes its general path (first write of a thread, a run to start, a deleted thread).
_GRAPH_WRITES_TARGET = """
SELECT m.id, m.active_run_id, m.title
  FROM {who}quests_mission m
  JOIN quests_graphthread t ON t.mission_id = m.id
  JOIN quests_run r ON r.id = m.active_run_id
 WHERE t.thread_id = %(thread_id)s AND t.deleted_at IS NULL
   AND m.owner_id = {user_id}
   AND ({token_mission_id} IS NULL OR m.id = {token_mission_id})
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
# On PostgreSQL the statement starts with who is calling (as the agent's checkpoint reads it), so
# that a put_writes is one round trip, authentication included: no row, the caller is not
# authenticated; a row without a mission, nothing was written.
GRAPH_WRITES_PG = f"""
WITH who AS (
    {CALLER}
), target AS ({_GRAPH_WRITES_TARGET.format(**_AS_WHO)}
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
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at, (SELECT id FROM target) AS mission_id FROM who"""
GRAPH_WRITES_COUNTED_PG = counted_pg(GRAPH_WRITES_PG, last_column="AS mission_id")
GRAPH_WRITES_SQLITE = (
    _GRAPH_WRITES_TARGET.format(**_AS_GIVEN),
    _GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITE_VALUES, on_conflict=_GRAPH_WRITE_REPLACES),  # once per special write
    _GRAPH_WRITE_INSERT.format(rows=_GRAPH_WRITE_VALUES, on_conflict=_GRAPH_WRITE_KEEPS),  # once per ordinary write
    _GRAPH_WRITES_TITLE.format(mission_id="%(mission_id)s"),
    _GRAPH_WRITES_BEAT.format(run_id="%(run_id)s"),
)

# ==================================================================================================
# Reads
# ==================================================================================================

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
        SELECT t.mission_id FROM {who}quests_graphthread t JOIN quests_mission m ON m.id = t.mission_id
         WHERE t.owner_id = {user_id} AND t.thread_id = %(thread_id)s AND t.deleted_at IS NULL
           AND m.owner_id = {user_id}
           AND ({token_mission_id} IS NULL OR m.id = {token_mission_id}))
   AND c.ns = %(ns)s
   AND (CAST(%(graph_id)s AS text) IS NULL OR c.graph_id = %(graph_id)s)
 ORDER BY c.graph_id DESC
 LIMIT 1"""
_GRAPH_TUPLE_WRITES = """
SELECT w.task_id, w.task_path, w.idx, w.channel, w.value
  FROM checkpoints_graphwrite w
 WHERE w.mission_id = {mission_id} AND w.ns = {ns} AND w.graph_id = {graph_id}"""
_GRAPH_TUPLE_WRITES_ORDER = "task_path, task_id, idx"
# On PostgreSQL the read starts with who is calling (as the agent's checkpoint reads it), so that a
# get_tuple is one round trip, authentication included: no row, the caller is not authenticated;
# a row without a checkpoint, there is none.
GRAPH_TUPLE_PG = f"""
WITH who AS (
    {CALLER}
), found AS ({_GRAPH_TUPLE_FOUND.format(**_AS_WHO)}
)
SELECT who.user_id, who.token_id, who.token_mission_id, who.last_used_at,
       found.mission_id, found.ns, found.graph_id, found.parent_graph_id, found.skeleton, found.metadata, found.checkpoint_id,
       (SELECT COALESCE(json_agg(s ORDER BY {", ".join(f"s.{column}" for column in _GRAPH_TUPLE_WRITES_ORDER.split(", "))}), '[]')
          FROM ({_GRAPH_TUPLE_WRITES.format(mission_id="found.mission_id", ns="found.ns", graph_id="found.graph_id")}) s) AS pending_writes,
       (SELECT json_object_agg(channel.name, convert_from(b.data, 'UTF8')::json ORDER BY channel.n)
          FROM jsonb_each(found.channels) WITH ORDINALITY AS channel(name, ref, n)
          JOIN checkpoints_blob b ON b.sha256 = channel.ref->>1) AS channel_values
  FROM who LEFT JOIN found ON true"""
GRAPH_TUPLE_COUNTED_PG = counted_pg(GRAPH_TUPLE_PG, last_column="AS channel_values")
GRAPH_TUPLE_SQLITE = (
    _GRAPH_TUPLE_FOUND.format(**_AS_GIVEN),
    # with the found row's mission, ns and graph id
    _GRAPH_TUPLE_WRITES.format(mission_id="%(mission_id)s", ns="%(ns)s", graph_id="%(graph_id)s") + f" ORDER BY {_GRAPH_TUPLE_WRITES_ORDER}",
    # with the found row's channel map
    """SELECT channel.key AS name, b.data
         FROM json_each(%(channels)s) channel
         JOIN checkpoints_blob b ON b.sha256 = json_extract(channel.value, '$[1]')
        ORDER BY channel.id""",
)
