"""Every statement of the agent's hot path, by name. Parameters are named (`%(name)s`); the runner
binds them server-side on PostgreSQL and as `:name` on SQLite.

A statement that only PostgreSQL can run in one piece (row locks, advisory locks, data-modifying
CTEs) has a `_PG` text; its SQLite counterpart is the same work as `_SQLITE` steps run in order
(SQLite serialises writers at BEGIN IMMEDIATE, so it needs no row lock).

One module per group of calls, each readable top to bottom: `runs` (a run's lock, heartbeat,
record, save state), `checkpoints` (the agent's checkpoint in its three forms), `ledger` (the operation ledger), `lifecycle`
(mission create, a run's start and end), `bundle` (the resume bundle), `graph` (LangGraph's put_writes and
get_tuple), and `refmaps` (the fragment every statement reads a checkpoint's agent-state refs with)."""

import re


def compact(statement: str) -> str:
    """`statement` with each run of whitespace made one space, and none beside a parenthesis, a
    comma or a comparison or concatenation operator, for a statement that would pass psycopg's
    4,096 bytes as written (it holds no literal with whitespace, a parenthesis or a comma in it:
    checked; so no operator with spaces around it is inside a literal)."""
    literals = re.findall(r"'[^']*'", statement)
    assert not any(re.search(r"[\s(),]", literal) for literal in literals), "a literal that compacting would change"
    return re.sub(r"\s*([(),]|<=|>=|<>|=|\|\|)\s*", r"\1", " ".join(statement.split()))
