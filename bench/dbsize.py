"""Measuring a database's growth for bench_vs_langgraph.py's bytes per checkpoint: a fresh
database of its own per system (made and dropped through the server's `postgres` database),
autovacuum off on every table, the database's size, and the relations that grew most."""

from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def database_url(base: str, suffix: str) -> str:
    """`base` (a database URL) naming the database `base`'s name + `suffix`."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path + suffix))


def _maintenance(url: str, statement: sql.Composable) -> None:
    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(scheme="postgresql", path="/postgres")), autocommit=True) as conn:
        conn.execute(statement)


def fresh_database(url: str) -> None:
    name = sql.Identifier(urlsplit(url).path.lstrip("/"))
    _maintenance(url, sql.SQL("DROP DATABASE IF EXISTS {}").format(name))
    _maintenance(url, sql.SQL("CREATE DATABASE {}").format(name))


def drop_database(url: str) -> None:
    _maintenance(url, sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(urlsplit(url).path.lstrip("/"))))


AUTOVACUUM_OFF = """
DO $$ DECLARE t record; BEGIN
  FOR t IN SELECT schemaname, tablename FROM pg_tables WHERE schemaname = 'public' LOOP
    EXECUTE format('ALTER TABLE %I.%I SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)', t.schemaname, t.tablename);
  END LOOP;
END $$"""
SIZE = "SELECT pg_database_size(current_database())"
# Every table, index and TOAST relation with all its forks: where the growth went.
RELATIONS = """
SELECT COALESCE((SELECT 'TOAST of ' || o.relname FROM pg_class o WHERE o.reltoastrelid = c.oid), c.relname) AS relname,
       pg_relation_size(c.oid, 'main') + pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm') AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'i', 't') AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""


def breakdown(before: dict[str, int], after: dict[str, int], writes: int) -> list[str]:
    """The relations that grew most, in bytes per write (`writes` of them)."""
    growth = sorted(((after[r] - before.get(r, 0), r) for r in after), reverse=True)
    return [f"    {size / writes:7.0f} B  {name}" for size, name in growth[:8] if size > 0]
