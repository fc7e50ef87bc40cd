"""Running the engine's statements on Django's own connection.

The statements go through Django's cursor wrappers, so they are part of Django's transaction,
its query log (the query budgets count them) and its execute wrappers (the request deadline). On
PostgreSQL the cursor binds server-side, whatever the connection's default, and psycopg prepares
each statement the first time it runs on the connection (unless preparing is off:
`prepare_threshold` in config/database.py), so a hot statement is parsed and planned once per
connection instead of once per call."""

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

import orjson
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.utils import timezone

M = TypeVar("M", bound=Model)
# Made once: `json.dumps` with arguments builds an encoder on every call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _db() -> BaseDatabaseWrapper:
    """Django's connection of this thread, looked up once per use (`connection` looks it up on
    every attribute)."""
    return connections[DEFAULT_DB_ALIAS]


def is_postgresql() -> bool:
    return _db().vendor == "postgresql"


def cursor():
    """A cursor on Django's connection: server-side binding on PostgreSQL, Django's own elsewhere."""
    db = _db()
    if db.vendor != "postgresql":
        return db.cursor()
    db.ensure_connection()
    raw = _preparing_cursor()(db.connection)
    # Django's own wrapping (query log, execute wrappers), as `connection.cursor()` does it.
    return db.make_debug_cursor(raw) if db.queries_logged else db.make_cursor(raw)


@cache
def _preparing_cursor() -> type:
    """A server-side binding cursor that prepares what it runs at once, not after the
    connection's threshold of runs; nothing when the connection prepares nothing."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    base: Any = ServerBindingCursor  # a psycopg Cursor, which django-stubs does not describe

    class PreparingCursor(base):
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None) -> Any:
            if prepare is None and self.connection.prepare_threshold is not None:
                prepare = True
            return super().execute(query, params, prepare=prepare, binary=binary)

    return PreparingCursor


def bound(statement: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters `statement` names, as the database takes them: JSON as text, times as the
    backend stores them. Only those it names: psycopg keeps a statement's parse only when it is
    sent at most 50 parameters, whatever the statement uses (a call may give more than one form
    of its statement names)."""
    db = _db()
    named = _named(statement)
    if db.vendor == "postgresql":
        return {name: json_text(value) if isinstance(value := params[name], dict) else value for name in named}
    adapt = db.ops.adapt_datetimefield_value
    return {name: json_text(value) if isinstance(value := params[name], dict) else adapt(value) if isinstance(value, datetime) else value for name in named}


@cache
def _named(statement: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_PARAMETER.findall(statement)))


_PARAMETER = re.compile(r"%\((\w+)\)[sbt]")


def json_text(value: Any) -> str:
    """JSON as the engine binds it: compact, unescaped text (PostgreSQL casts it where it is jsonb).
    Written by orjson (several times faster in the checkpoint's statement, which binds six such
    values); what orjson refuses (a key that is not text, an integer past 64 bits) as json writes it."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _JSON.encode(value)


def fetch(statement: str, params: Mapping[str, Any]) -> list[tuple]:
    """One statement, its rows (none for a write without RETURNING)."""
    with cursor() as c:
        c.execute(statement, bound(statement, params))
        return c.fetchall() if _has_rows(c) else []


def _has_rows(c: Any) -> bool:
    """Whether the statement returned a result set. psycopg's `description` makes a column object
    per column on every look (the checkpoint's read has ~50): its result says so without them."""
    result = getattr(c.cursor, "pgresult", None)
    if result is not None:
        return bool(result.nfields)
    return c.description is not None


def fetch_named(statement: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    with cursor() as c:
        c.execute(statement, bound(statement, params))
        names = [column.name for column in c.description]
        return [dict(zip(names, row)) for row in c.fetchall()]


def steps(statements: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[list[tuple], int]]:
    """Several statements one after the other (SQLite's form of a PostgreSQL one-statement write):
    each one's rows and row count."""
    results = []
    with cursor() as c:
        for statement, params in statements:
            c.execute(statement, bound(statement, params))
            results.append((c.fetchall() if c.description else [], c.rowcount))
    return results


def fetch_each_named(statements: Iterable[tuple[str, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Several reads one after the other (SQLite's form of a PostgreSQL one-statement read): each
    one's rows as dicts."""
    results = []
    with cursor() as c:
        for statement, params in statements:
            c.execute(statement, bound(statement, params))
            names = [column[0] for column in c.description]
            results.append([dict(zip(names, row)) for row in c.fetchall()])
    return results


def model_from_row(model: type[M], values: Sequence[Any]) -> M:
    """An instance of `model` from its columns in field order, converted as Django converts them
    when it reads the model (JSON decoded, SQLite's times parsed)."""
    db = _db()
    names, converting = _converting(model, db.vendor)
    converted = list(values)
    for i, expression in converting:
        converted[i] = _converted(db, expression, converted[i])
    return model.from_db(DEFAULT_DB_ALIAS, names, converted)


def field_value(model: type[Model], name: str, value: Any) -> Any:
    """One column of `model` read outside an instance, converted as Django converts it."""
    return _converted(_db(), model._meta.get_field(name).get_col(model._meta.db_table), value)  # type: ignore[union-attr]


def _converted(db: BaseDatabaseWrapper, expression: Any, value: Any) -> Any:
    for converter in db.ops.get_db_converters(expression) + expression.get_db_converters(db):
        value = converter(value, expression, db)
    return value


@cache
def _converting(model: type[Model], vendor: str) -> tuple[list[str], list[tuple[int, Any]]]:
    """A model's column names in field order, and the columns the backend converts as it reads
    them: found once per model (most columns have no converter), not on every row."""
    db = _db()
    fields = model._meta.concrete_fields
    columns = [(i, field.get_col(model._meta.db_table)) for i, field in enumerate(fields)]
    converting = [(i, col) for i, col in columns if db.ops.get_db_converters(col) + col.get_db_converters(db)]
    return [f.attname for f in fields], converting


def json_value(value: Any) -> Any:
    """A JSON column read outside a model (PostgreSQL's driver hands Django's JSON as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def now() -> datetime:
    return timezone.now()


def audit_event_arrays(events: Sequence[Any]) -> dict[str, list[Any]]:
    """Audit events as the column arrays a statement unnests (`AUDIT_EVENTS_PG`): one insert for
    any number of events."""
    return {
        "event_entities": [e.entity for e in events],
        "event_entity_ids": [e.entity_id for e in events],
        "event_actions": [e.action for e in events],
        "event_from_states": [e.from_state for e in events],
        "event_to_states": [e.to_state for e in events],
        "event_data": [json_text(e.data) for e in events],
    }
