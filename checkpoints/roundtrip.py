"""Several statements in one round trip to the database.

The agent's hot path (a record, an operation receipt, a checkpoint) used to cost one round trip per
statement, and on a local PostgreSQL half of a request's time was spent waiting on them. A
`RoundTrip` collects statements that do not depend on one another's Python-side results — the SQL
Django compiles for a queryset, an insert or an update, nothing hand-written — and sends them
together. They still run one after the other, in the order given, each seeing the effects of the
ones before it, inside the caller's transaction.

On PostgreSQL with client-side binding (Django's default for psycopg 3) the statements travel in a
single `execute` and their results are read back with `nextset()`. Elsewhere (SQLite, or
server-side binding, which cannot take several statements) each statement is executed in turn with
the same results, so code written against a `RoundTrip` behaves the same on every database."""

from collections.abc import Iterable
from typing import Any, cast

from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model, QuerySet, sql
from django.db.models.constants import OnConflict


class Step:
    """One statement of a round trip; its result is filled in when the round trip runs."""

    def __init__(self, statements: list[tuple[str, tuple]]) -> None:
        self.statements = statements
        self.done = False

    def _deliver(self, results: list[tuple[list[tuple] | None, int]]) -> None:
        raise NotImplementedError


class Selected(Step):
    """`rows`: what evaluating the queryset would have given (model instances, dicts or tuples)."""

    def __init__(self, queryset: QuerySet, using: str) -> None:
        # A copy, as the queryset's own methods make one (private API, not in the stubs).
        self.queryset = queryset._chain()  # type: ignore[attr-defined]
        self.compiler = self.queryset.query.get_compiler(using=using)
        self.rows: list[Any] = []
        try:
            statement = self.compiler.as_sql()
        except EmptyResultSet:  # `.none()` or an empty `__in`: nothing to ask the database
            statement = None
        super().__init__([statement] if statement else [])

    def _deliver(self, results) -> None:
        fetched = results[0][0] or []
        compiler = self.compiler
        # Django's own iterables turn the rows into objects (converters, select_related, values()):
        # they are handed a compiler whose "execution" returns the rows already fetched.
        compiler.execute_sql = lambda *args, **kwargs: iter([fetched]) if fetched else iter([])
        self.queryset.query.get_compiler = lambda *args, **kwargs: compiler
        self.rows = list(self.queryset)


class Inserted(Step):
    """Inserted objects get their primary keys. With `ignore_conflicts`, `inserted` holds the
    primary keys of the rows actually written (the others already existed)."""

    def __init__(self, objs: list[Model], using: str, *, ignore_conflicts: bool, returning: bool) -> None:
        self.objs = objs
        model = type(objs[0])
        opts = model._meta
        pk_assigned = all(obj.pk is not None for obj in objs)
        fields = [f for f in opts.concrete_fields if not f.generated and (pk_assigned or f is not opts.pk)]
        query = sql.InsertQuery(model, on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
        query.insert_values(fields, objs, raw=False)
        self.compiler = query.get_compiler(using=using)
        connection = connections[using]
        self.returning = returning and connection.features.can_return_rows_from_bulk_insert
        if self.returning:
            self.compiler.returning_fields = [opts.pk]
        self.ignore_conflicts = ignore_conflicts
        self.using = using
        self.inserted: list[Any] = []
        super().__init__(self.compiler.as_sql())

    def _deliver(self, results) -> None:
        rows = [row for fetched, _ in results for row in (fetched or [])]
        pks = [row[0] for row in rows]
        if self.returning and not self.ignore_conflicts:
            for obj, pk in zip(self.objs, pks):
                obj.pk = pk
        for obj in self.objs:
            obj._state.adding = False
            obj._state.db = self.using
        self.inserted = pks


class Updated(Step):
    """`count`: how many rows the update changed (a compare-and-set reads it)."""

    def __init__(self, queryset: QuerySet, values: dict[str, Any], using: str) -> None:
        query = cast(sql.UpdateQuery, queryset.query.chain(sql.UpdateQuery))
        query.add_update_values(values)
        try:
            statement = query.get_compiler(using=using).as_sql()
        except EmptyResultSet:  # it matches nothing: nothing to send
            statement = ("", ())
        super().__init__([statement] if statement[0] else [])
        self.count = 0

    def _deliver(self, results) -> None:
        self.count = sum(max(count, 0) for _, count in results)


class RoundTrip:
    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using
        self.steps: list[Step] = []

    def select(self, queryset: QuerySet) -> Selected:
        return self._add(Selected(queryset, self.using))

    def insert(self, objs: Model | Iterable[Model], *, ignore_conflicts: bool = False, returning: bool = True) -> Inserted | None:
        objs = [objs] if isinstance(objs, Model) else list(objs)
        if not objs:
            return None
        return self._add(Inserted(objs, self.using, ignore_conflicts=ignore_conflicts, returning=returning))

    def update(self, queryset: QuerySet, **values: Any) -> Updated:
        return self._add(Updated(queryset, values, self.using))

    def save(self, obj: Model, update_fields: Iterable[str]) -> Updated:
        """`obj.save(update_fields=…)` in this round trip: each column gets the value save() would
        write (`pre_save`, so auto_now times included)."""
        # update_fields name concrete fields (save() refuses anything else).
        columns = [cast(Field, obj._meta.get_field(name)) for name in dict.fromkeys(update_fields)]
        values = {f.attname: f.pre_save(obj, add=False) for f in columns}
        return self.update(type(obj)._default_manager.filter(pk=obj.pk), **values)

    def _add(self, step: Step):
        self.steps.append(step)
        return step

    def run(self) -> None:
        """Send every statement collected so far, then start empty again."""
        steps, self.steps = [s for s in self.steps if s.statements], []
        if not steps:
            return
        connection = connections[self.using]
        statements = [statement for step in steps for statement in step.statements]
        with connection.cursor() as cursor:
            if len(statements) > 1 and _takes_several_statements(connection):
                cursor.execute("; ".join(s for s, _ in statements), tuple(p for _, params in statements for p in params))
                results = [_result(cursor)]
                while cursor.nextset():
                    results.append(_result(cursor))
            else:
                results = []
                for statement, params in statements:
                    cursor.execute(statement, params)
                    results.append(_result(cursor))
        position = 0
        for step in steps:
            step._deliver(results[position : position + len(step.statements)])
            step.done = True
            position += len(step.statements)


def _takes_several_statements(connection) -> bool:
    return connection.vendor == "postgresql" and connection.settings_dict.get("OPTIONS", {}).get("server_side_binding") is not True


def _result(cursor) -> tuple[list[tuple] | None, int]:
    return (cursor.fetchall() if cursor.description else None), cursor.rowcount


def one_round_trip(*querysets: QuerySet) -> list[list[Any]]:
    """Evaluate several querysets in one round trip; returns their rows in the same order."""
    trip = RoundTrip(querysets[0].db if querysets else DEFAULT_DB_ALIAS)
    selected = [trip.select(qs) for qs in querysets]
    trip.run()
    return [s.rows for s in selected]
