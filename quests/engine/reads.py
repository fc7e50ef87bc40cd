"""The engine's named reads. Each is one round trip on PostgreSQL (one statement); on SQLite the
same sections are read one statement at a time, with the same results.

A read returns plain values (dicts, lists, datetimes), typed as the API shows them: the services
build their answers from them without models in between. The one exception is `agent_token`,
whose token and user are who every service call acts as (`quests.services.audit.Actor`)."""

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model

from quests.engine import runner
from quests.engine.checkpoints import Seen, as_who
from quests.engine.sql import bundle as bundle_sql, graph as graph_sql, tokens as tokens_sql
from quests.engine.writes import Caller, Count, Credentials
from quests.models import AgentToken

# The columns of the bundle's sections that hold a time, a JSON value or a boolean: PostgreSQL
# hands each section as JSON (times as ISO 8601 text); Django's SQLite connection hands times as
# naive UTC datetimes, and may hand booleans as integers and JSON as text.
_TIMES = frozenset({"created_at", "updated_at", "retry_at", "revoked_at"})
_JSON = frozenset({"data", "request", "receipt", "payload", "decided_payload"})
_BOOLEANS = frozenset({"verified", "resolved", "abandoned", "archived", "retryable", "gate", "withdrawn", "always"})


def agent_token(token_hash: str, count: Count | None = None) -> AgentToken | None:
    """The agent token with this hash, unless revoked, with its user (whether active is the
    caller's to judge): what the ORM's select_related would read, as one prepared statement.
    With `count` the same statement counts the request of a valid token (`count.value`)."""
    if count is None:
        rows = runner.fetch(tokens_sql.AGENT_TOKEN, {"token_hash": token_hash})
    else:
        rows = count.fetch(tokens_sql.AGENT_TOKEN_COUNTED_PG, tokens_sql.COUNTED_TOKEN_ROW_PG, {"token_hash": token_hash})
    if not rows:
        return None
    width = len(AgentToken._meta.concrete_fields)
    token = runner.model_from_row(AgentToken, rows[0][:width])
    token.user = runner.model_from_row(get_user_model(), rows[0][width:])
    return token


def resume_bundle(mission_id: int, *, user_id: int | None, token_mission_id: int | None) -> dict[str, Any] | None:
    """The resume bundle's rows by section (`bundle_sql.RESUME_BUNDLE_SECTIONS`: a dict for a single row
    or None, a list of dicts otherwise) and the head's `agent_state`; None when the mission is
    not there or not the caller's (`user_id` None: the caller already holds the mission)."""
    params = {"mission_id": mission_id, "user_id": user_id, "token_mission_id": token_mission_id, "now": runner.now()}
    if runner.is_postgresql():
        ((*sections, agent_state),) = runner.fetch(bundle_sql.RESUME_BUNDLE_PG, params)
        rows: dict[str, Any] = {name: runner.json_value(value) for (name, _, _), value in zip(bundle_sql.RESUME_BUNDLE_SECTIONS, sections)}
        rows["agent_state"] = runner.json_value(agent_state) if agent_state is not None else {}
        if rows["mission"] is None:
            return None
        for name, value in rows.items():
            if name != "agent_state":
                for row in [value] if isinstance(value, dict) else value or ():
                    _times_read(row)
        return rows
    *results, parts = runner.fetch_each_named((statement, params) for statement in bundle_sql.RESUME_BUNDLE_SQLITE)
    rows = {}
    for (name, _, order), found in zip(bundle_sql.RESUME_BUNDLE_SECTIONS, results):
        converted = [_sqlite_row(row) for row in found]
        rows[name] = converted if order is not None else (converted[0] if converted else None)
    if rows["mission"] is None:
        return None
    rows["agent_state"] = {part["key"]: json.loads(part["data"]) for part in parts}
    return rows


def _times_read(row: dict[str, Any]) -> None:
    for column in _TIMES.intersection(row):
        if row[column] is not None:
            row[column] = datetime.fromisoformat(row[column])


def _sqlite_row(row: dict[str, Any]) -> dict[str, Any]:
    for column in _JSON.intersection(row):
        if row[column] is not None:
            row[column] = json.loads(row[column])
    for column in _BOOLEANS.intersection(row):
        if row[column] is not None:
            row[column] = bool(row[column])
    for column in _TIMES.intersection(row):
        if row[column] is not None:
            value = row[column] if isinstance(row[column], datetime) else datetime.fromisoformat(row[column])
            row[column] = value.replace(tzinfo=UTC)
    return row


# The columns of GRAPH_TUPLE_PG after who called.
_GRAPH_TUPLE_COLUMNS = ("mission_id", "ns", "graph_id", "parent_graph_id", "skeleton", "metadata", "checkpoint_id", "pending_writes", "channel_values")


def graph_tuple(
    who: Caller | Credentials, *, thread_id: str, ns: str, graph_id: str | None, count: Count | None = None
) -> tuple[Seen, dict[str, Any] | None] | None:
    """The LangGraph saver's `get_tuple`: who called, and the thread's latest checkpoint in `ns`
    (or `graph_id`'s), its pending writes and channel values, as the API answers it (None when
    there is none). None when the token is not valid: on PostgreSQL the read authenticates an
    agent token's `Credentials` itself (and with `count` counts the request); SQLite takes a
    `Caller` (authenticated before)."""
    params = {"thread_id": thread_id, "ns": ns, "graph_id": graph_id}
    if runner.is_postgresql():
        read = as_who(who, graph_sql.GRAPH_TUPLE_PG, graph_sql.GRAPH_TUPLE_COUNTED_PG, params, count)
        if read is None:
            return None
        seen, columns = read
        if columns[0] is None:
            return seen, None
        row = dict(zip(_GRAPH_TUPLE_COLUMNS, columns))
        for column in ("skeleton", "metadata", "pending_writes"):
            row[column] = runner.json_value(row[column])
        row["channel_values"] = runner.json_value(row["channel_values"]) if row["channel_values"] is not None else {}
        return seen, row
    if not isinstance(who, Caller):
        raise ValueError("SQLite reads a LangGraph checkpoint for a caller authenticated before.")
    seen = Seen.known(who)
    params.update(who.params())
    first, writes, values = graph_sql.GRAPH_TUPLE_SQLITE
    (found,) = runner.fetch_each_named([(first, params)])
    if not found:
        return seen, None
    row = found[0]
    del row["id"]
    row["skeleton"], row["metadata"] = json.loads(row["skeleton"]), json.loads(row["metadata"])
    found_params = {"mission_id": row["mission_id"], "ns": row["ns"], "graph_id": row["graph_id"], "channels": row.pop("channels")}
    pending, parts = runner.fetch_each_named([(writes, found_params), (values, found_params)])
    row["pending_writes"] = [{**write, "value": json.loads(write["value"])} for write in pending]
    row["channel_values"] = {part["name"]: json.loads(part["data"]) for part in parts}
    return seen, row
