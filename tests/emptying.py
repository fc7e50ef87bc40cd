"""Emptying the test database after a transactional test (TransactionTestCase, `transactional_db`,
`live_server`) by deleting the rows of the tables that have any, instead of Django's flush.

Django's flush truncates every table (about 40, one TRUNCATE that must lock and replace each
table's files) and then emits post_migrate, which deletes and re-creates every content type and
permission; on this machine that cost 0.3-1 s per test, most of the transactional tests' time. Here
one query finds the tables with rows and one DELETE per such table empties them (a test leaves
rows in a handful); DELETE takes no table lock and writes only the rows there are, so it measured
faster than a TRUNCATE of the same tables. Django declares its foreign keys DEFERRABLE INITIALLY
DEFERRED, so the DELETEs may run in any order inside one transaction.

The guarantee stays the flush's: the next test starts with every table empty except the rows
migrate seeds (post_migrate's content types and permissions; no data migration seeds rows). Those
are left in place when the test did not change them: the same query compares them with what they
were when the test database was made. When a test did change them, Django's own flush runs, which
re-seeds them, and what they then are becomes the reference.
"""

from django.core.management import call_command
from django.db import connections, transaction
from django.test import TransactionTestCase


class Tables:
    """A database's tables as the flush knows them, which of them migrate seeds, and a digest of
    their rows as seeded."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        connection = connections[alias]
        with connection.cursor() as cursor:
            names = sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))
            quote = connection.ops.quote_name
            cursor.execute(" UNION ALL ".join(f"SELECT '{name}' WHERE EXISTS (SELECT FROM {quote(name)})" for name in names))
            self.seeded = sorted(name for (name,) in cursor.fetchall())
        self.others = [name for name in names if name not in self.seeded]
        self.query = self._query()
        self.digests = self._digests()

    def _query(self) -> str:
        """One query answering (table, NULL) for each table with rows and (table, digest) for each
        seeded table, so that emptying costs one round trip plus one per table to empty."""
        quote = connections[self.alias].ops.quote_name
        rows = [f"SELECT '{name}', NULL WHERE EXISTS (SELECT FROM {quote(name)})" for name in self.others]
        rows += [f"SELECT '{name}', (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {quote(name)} t)" for name in self.seeded]
        return " UNION ALL ".join(rows)

    def _digests(self) -> dict[str, str]:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(self.query)
            return {name: digest for name, digest in cursor.fetchall() if digest is not None}

    def empty(self) -> None:
        connection = connections[self.alias]
        with transaction.atomic(using=self.alias), connection.cursor() as cursor:
            cursor.execute(self.query)
            found = cursor.fetchall()
            if any(digest is not None and digest != self.digests[name] for name, digest in found):
                changed = True
            else:
                changed = False
                for name, _ in found:
                    if name not in self.digests:
                        cursor.execute(f"DELETE FROM {connection.ops.quote_name(name)}")
        if changed:
            # As TransactionTestCase flushes: post_migrate then seeds the rows afresh.
            call_command("flush", verbosity=0, interactive=False, database=self.alias, reset_sequences=False, inhibit_post_migrate=False)
            self.digests = self._digests()


_tables: dict[str, Tables] = {}


def remember(alias: str) -> None:
    """Called once the test database is made, before any test ran (tests/conftest.py): which of its
    tables migrate seeded, and with what."""
    _tables[alias] = Tables(alias)


def install() -> None:
    """Make every TransactionTestCase (pytest-django's transactional tests are ones) empty its
    databases this way. The flush's variants this does not reproduce keep Django's own teardown:
    `available_apps` (a flush without post_migrate) and serialized rollback (which restores rows)."""
    flush_all = TransactionTestCase._fixture_teardown
    if getattr(flush_all, "empties", False):
        return

    def _fixture_teardown(self: TransactionTestCase) -> None:
        aliases = self._databases_names(include_mirrors=False)
        # A database whose seeded rows were not recorded before the tests ran cannot be told apart
        # from one a test left rows in.
        if self.available_apps is not None or self.serialized_rollback or not all(alias in _tables for alias in aliases):
            return flush_all(self)
        for alias in aliases:
            _tables[alias].empty()
        return None

    _fixture_teardown.empties = True  # type: ignore[attr-defined]
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]
