"""The storage engine: the one place the agent's hot path talks SQL.

`sql` holds every hot statement as a named, fixed text, readable top to bottom; `runner` executes
them on Django's own connection, inside Django's transaction; `writes` and `reads` are the named
operations the services call (lock a run, write a checkpoint, beat, remember a key, …).

On PostgreSQL a statement is bound server-side and prepared by psycopg (`prepare_threshold`, see
config/database.py), and each operation is one round trip: a write that touches several tables is
one statement of data-modifying CTEs. On SQLite, which has no data-modifying CTEs and no round
trips worth saving, the same operation runs as the same steps one statement at a time, with the
same results. docs/architecture.md gives the measurements behind that choice."""
