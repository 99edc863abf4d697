"""What Postgres and SQLite do differently, answered in one place: the statements and the
operations of the store ask their dialect, never the backend's name.

Postgres is a server reached over a network: a round trip costs more than a read, rows are
locked one by one (FOR UPDATE / FOR SHARE, SKIP LOCKED), and a statement may do several
writes (data-modifying CTEs). SQLite is a file in the process: a read costs nothing, and a
writer locks the whole database (BEGIN IMMEDIATE), so a write checks the run's lease first
in its own transaction instead of in the statement.

Example::

    dialect = dialect_of("postgresql")
    lock = dialect.for_update(select(runs.c.status).where(...))   # FOR UPDATE on Postgres
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal_column
from sqlalchemy.dialects import postgresql, sqlite


class Dialect:
    """The answers of one backend; ``dialect_of`` gives the store's."""

    name: str
    # Rows are locked one by one (FOR UPDATE / FOR SHARE, SKIP LOCKED, MATERIALIZED CTEs):
    # a fenced write checks the lease in its own statement, and sweeps skip locked rows.
    locks_rows: bool
    # LISTEN/NOTIFY: a write wakes the handles that wait on the run, in the same statement.
    notifies: bool
    # Each statement is a round trip: a read the caller may need rides on a write
    # (the claim's has_steps) rather than costing one more.
    round_trips: bool
    # Statements that write several tables at once (WITH ... DELETE/INSERT ... RETURNING)
    # and LATERAL joins: gc and the carrying settle are one statement each.
    writes_in_ctes: bool
    # Transaction-level advisory locks: the first delivery of an item runs in one
    # transaction (``fanout/open_item.py``).
    advisory_locks: bool
    # Session-level advisory locks, which end with their session: a process's proof of
    # life (``store/liveness.py``), so a claimant sees at once that a lease's owner died.
    session_locks: bool
    # Several statements travel in one round trip (psycopg's pipeline mode).
    pipelines: bool
    # The planner takes settings in a transaction (SET LOCAL jit, enable_seqscan).
    planner_settings: bool
    # How a query plan is asked for.
    explain: str

    def __init__(self) -> None:
        # The database's clock, in seconds since the epoch, as each statement reads it.
        self.now: Any = None
        # The transaction's start (a value that is stable within a statement: an index
        # condition); the clock itself where the backend has no such value.
        self.stable_now: Any = None

    def insert(self, table: Any) -> Any:
        """INSERT with the backend's ON CONFLICT clauses."""
        raise NotImplementedError

    def greatest(self, *values: Any) -> Any:
        """The largest of ``values`` (a scalar function, not the aggregate)."""
        raise NotImplementedError

    def for_update(self, stmt: Any, *, read: bool = False) -> Any:
        """``stmt`` locking the rows it reads (FOR SHARE with ``read``) where rows are
        locked one by one; as it is where the writer's transaction locks the database."""
        if not self.locks_rows:
            return stmt
        return stmt.with_for_update(read=read) if read else stmt.with_for_update()


class Postgres(Dialect):
    name = "postgresql"
    locks_rows = True
    notifies = True
    round_trips = True
    writes_in_ctes = True
    advisory_locks = True
    session_locks = True
    pipelines = True
    planner_settings = True
    explain = "EXPLAIN "

    def __init__(self) -> None:
        super().__init__()
        self.now = literal_column("CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)")
        self.stable_now = literal_column("CAST(EXTRACT(EPOCH FROM now()) AS DOUBLE PRECISION)")

    def insert(self, table: Any) -> Any:
        return postgresql.insert(table)

    def greatest(self, *values: Any) -> Any:
        return func.greatest(*values)


class SQLite(Dialect):
    name = "sqlite"
    locks_rows = False
    notifies = False
    round_trips = False
    writes_in_ctes = False
    advisory_locks = False
    session_locks = False
    pipelines = False
    planner_settings = False
    explain = "EXPLAIN QUERY PLAN "

    def __init__(self) -> None:
        super().__init__()
        self.now = literal_column("((julianday('now') - 2440587.5) * 86400.0)")
        self.stable_now = self.now

    def insert(self, table: Any) -> Any:
        return sqlite.insert(table)

    def greatest(self, *values: Any) -> Any:
        return func.max(*values)


def dialect_of(backend: str) -> Dialect:
    """The dialect of a backend name (``URL.get_backend_name()``): Postgres or SQLite."""
    if backend == "postgresql":
        return Postgres()
    if backend == "sqlite":
        return SQLite()
    raise ValueError(f"durable_database_url: unsupported database {backend!r} (postgresql, sqlite)")
