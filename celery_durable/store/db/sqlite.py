"""SQLite engines: the store's own (WAL, transactions that take the write lock up front),
and one on a host framework's connection while its open transaction holds the file.

SQLite has one writer per file. While Django's connection holds a transaction on the
store's file (``TestCase`` wraps every test in one), a connection of the store's own
waits for the lock and fails with "database is locked", even to set ``PRAGMA
journal_mode``. So the store's statements go on the framework's own DB-API connection
instead, each of the store's transactions a savepoint inside the framework's: they see
its uncommitted rows, and roll back with it, as a start in Django's transaction does on
Postgres.

``SHARED_SQLITE`` holds the functions that find such a connection for a store's URL (the
Django app adds one); ``shared_engine`` asks them.

Example::

    engine = own_engine(make_url("sqlite:////var/lib/shop/durable.sqlite3"))
    engine = shared_engine(make_url("sqlite:////tmp/test_shop.sqlite3"))
    if engine is not None:           # Django's test transaction holds that file
        with engine.begin() as conn:   # SAVEPOINT ... RELEASE on Django's connection
            conn.execute(statement)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

# Each takes a SQLite store's URL and returns the DB-API connection of this thread whose
# open transaction holds that file, or None (the store uses its own connections).
SHARED_SQLITE: list[Callable[[URL], Any | None]] = []

_NAMES = itertools.count(1)
_ENGINES = threading.local()  # per thread, as the framework's connections are


def own_engine(url: URL) -> Engine:
    """The store's own engine on ``url``'s file."""
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front: no deadlock between two readers
        # that both want to write.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class Savepoints:
    """The framework's DB-API connection as the store's engine sees it: a transaction is a
    savepoint, opened by its first statement; ``commit`` releases it, ``rollback`` and
    ``close`` undo it, and the framework's own transaction is never ended here."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._name: str | None = None

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        if self._name is None:
            self._name = f"celery_durable_{next(_NAMES)}"
            self._connection.execute(f"SAVEPOINT {self._name}")
        return self._connection.cursor(*args, **kwargs)

    def commit(self) -> None:
        if self._name is not None:
            self._connection.execute(f"RELEASE SAVEPOINT {self._name}")
            self._name = None

    def rollback(self) -> None:
        if self._name is not None:
            self._connection.execute(f"ROLLBACK TO SAVEPOINT {self._name}")
            self._connection.execute(f"RELEASE SAVEPOINT {self._name}")
            self._name = None

    def close(self) -> None:
        self.rollback()

    def __getattr__(self, name: str) -> Any:
        # What SQLAlchemy's dialect asks of a pysqlite connection (create_function, ...).
        return getattr(self._connection, name)


def shared_connection(url: URL) -> Any | None:
    """The host framework's connection whose open transaction holds ``url``'s file."""
    for source in SHARED_SQLITE:
        found = source(url)
        if found is not None:
            return found
    return None


def shared_engine(url: URL) -> Engine | None:
    """An engine on the framework's connection while its transaction holds ``url``'s file
    in this thread (None otherwise): one per connection, kept while it is the same."""
    if not SHARED_SQLITE:
        return None
    connection = shared_connection(url)
    if connection is None:
        return None
    cached: dict[str, tuple[Any, Engine]] = _ENGINES.__dict__.setdefault("by_url", {})
    key = url.render_as_string()
    held = cached.get(key)
    if held is not None and held[0] is connection:
        return held[1]
    engine = create_engine("sqlite://", creator=lambda: Savepoints(connection), poolclass=NullPool)
    cached[key] = (connection, engine)
    return engine
