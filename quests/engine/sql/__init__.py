"""Every statement of the agent's hot path, by name. Parameters are named (`%(name)s`); the runner
binds them server-side on PostgreSQL and as `:name` on SQLite.

A statement that only PostgreSQL can run in one piece (row locks, advisory locks, data-modifying
CTEs) has a `_PG` text; its SQLite counterpart is the same work as `_SQLITE` steps run in order
(SQLite serialises writers at BEGIN IMMEDIATE, so it needs no row lock).

One module per group of calls, each readable top to bottom: `runs` (a run's lock, the agent's
checkpoint, heartbeat, record, save state, run start), `ledger` (the operation ledger), `lifecycle`
(mission create, a run's end), `bundle` (the resume bundle), `graph` (LangGraph's put_writes and
get_tuple), and `refmaps` (the fragment every statement reads a checkpoint's agent-state refs with)."""
