"""Connections to the store: an engine per process, the psycopg fast path, LISTEN.

Prefork children must not share the parent's sockets, so the engine is created lazily per
process and forgotten (not closed) in a forked child. Hot-path statements skip
SQLAlchemy's per-execute work: they are compiled once and sent straight to a psycopg
connection each thread keeps.

Example::

    db = Connections(make_url("postgresql+psycopg://postgres@127.0.0.1/test"))
    with db.transaction() as conn:
        conn.execute(statement)
"""

from __future__ import annotations

import logging
import os
import select as select_module
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from ..errors import ConfigurationError

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]

logger = logging.getLogger("celery_durable.store")

APP_NAME = "celery_durable"

_ALL: weakref.WeakSet[Connections] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for connections in list(_ALL):
        connections._after_fork_in_child()


os.register_at_fork(after_in_child=_forget_after_fork)


def _held_slot(relaxed: bool) -> str:
    return "held_relaxed" if relaxed else "held"


def _has_pending_input(driver: Any) -> bool:
    try:
        readable, _, _ = select_module.select([driver.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def require_driver(url: URL) -> None:
    """A Postgres URL needs psycopg 3: say which extra installs it."""
    if url.get_backend_name() == "postgresql" and psycopg is None:
        raise ConfigurationError(
            f"durable_database_url={url.render_as_string(hide_password=True)!r} needs the "
            'psycopg driver: pip install "celery-durable[postgres]"'
        )


def parse_url(url: str) -> Any:
    """Parse ``durable_database_url``; an unsupported or misspelt one names the fix."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types here
        raise ConfigurationError(
            f"durable_database_url={url!r} is not a valid URL: {exc}"
        ) from None
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg2", "postgres+psycopg"):
        raise ConfigurationError(
            f"durable_database_url={url!r}: use a postgresql+psycopg:// URL "
            "(celery_durable talks to Postgres through psycopg 3)"
        )
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(
            f"durable_database_url={url!r}: only postgresql+psycopg (psycopg 3) and sqlite "
            "are supported"
        )
    require_driver(parsed)
    return parsed


class Connections:
    """The engine, per-thread driver connections and transactions of one store."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.is_postgres = url.get_backend_name() == "postgresql"
        self._engine: Engine | None = None
        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}
        self._local = threading.local()
        self._pid = -1
        self._lock = threading.Lock()
        _ALL.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock at fork time: the child gets a fresh one,
        # and must not touch the parent's pooled sockets.
        self._lock = threading.Lock()
        self._local = threading.local()  # psycopg never closes a parent's socket on GC
        if self._engine is not None:
            self._engine.dispose(close=False)
        self._engine = None

    @property
    def engine(self) -> Engine:
        """This process's engine: prefork children must not share the parent's sockets."""
        engine = self._engine
        if engine is not None and self._pid == os.getpid():
            return engine
        with self._lock:
            if self._engine is not None and self._pid != os.getpid():
                self._engine.dispose(close=False)
                self._engine = None
            if self._engine is None:
                self._engine = self._create_engine()
                self._pid = os.getpid()
            return self._engine

    def _create_engine(self) -> Engine:
        if self.is_postgres:
            return create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                pool_size=5,
                max_overflow=10,
                pool_reset_on_return=None,
                # Off the hot path: a connection killed by a server restart is replaced.
                pool_pre_ping=True,
                connect_args=self._connect_args(),
            )
        engine = create_engine(self.url, connect_args={"timeout": 30, "check_same_thread": False})

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

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One atomic statement (autocommit on Postgres, a transaction on SQLite)."""
        if self.is_postgres:
            with self.engine.connect() as conn:
                yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """Reads; on SQLite the transaction a read opens (BEGIN IMMEDIATE) ends at once."""
        with self.engine.connect() as conn:
            yield conn
            if not self.is_postgres:
                conn.rollback()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Several statements in one transaction."""
        if self.is_postgres:
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="READ COMMITTED")
                with conn.begin():
                    yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    def dispose(self) -> None:
        for slot in (_held_slot(False), _held_slot(True)):
            held = getattr(self._local, slot, None)
            if held is not None and held[0] == os.getpid():
                held[1].close()
            setattr(self._local, slot, None)
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def one(
        self, stmt: Any, params: dict[str, Any], *, retry: bool = False, relaxed: bool = False
    ) -> tuple[Any, ...] | None:
        """Run one hot-path statement and return its first row as a tuple (or None).

        On Postgres the statement goes straight to psycopg, compiled once, on a connection
        each thread keeps: SQLAlchemy's per-execute work and a pool checkout would cost
        about a third of a step's write. SQLite takes the regular path, in a
        BEGIN IMMEDIATE transaction. ``retry``: the statement is idempotent (fenced, or
        insert-or-verify), so a connection that died (server restart, idle kill) is
        replaced and the statement sent once more. ``relaxed``: commit without waiting for
        the WAL flush (``synchronous_commit=off``), on a connection of its own.
        """
        if not self.is_postgres:
            with self.write() as conn:
                row = conn.execute(stmt, params).first()
                return None if row is None else tuple(row)
        compiled = self._compiled.get(id(stmt))
        if compiled is None:
            done = stmt.compile(dialect=self.engine.dialect)
            compiled = self._compiled[id(stmt)] = (str(done), dict(done.params))
        sql, defaults = compiled
        for last_try in (not retry, True):
            driver = self._held_connection(relaxed)
            try:
                return driver.execute(sql, {**defaults, **params}).fetchone()  # type: ignore[no-any-return]
            except psycopg.OperationalError:
                setattr(self._local, _held_slot(relaxed), None)  # reconnect next call
                driver.close()
                if last_try:
                    raise
        raise AssertionError("unreachable")

    def _held_connection(self, relaxed: bool = False) -> Any:
        """This thread's autocommit psycopg connection (a forked child opens its own)."""
        slot = _held_slot(relaxed)
        held = getattr(self._local, slot, None)
        if held is not None and held[0] == os.getpid() and not held[1].closed:
            if not _has_pending_input(held[1]):
                return held[1]
            # An idle connection with input waiting was terminated by the server (restart,
            # idle killer): replace it before sending a statement that must not be retried.
            held[1].close()
        driver = self.driver_connect("-c synchronous_commit=off" if relaxed else None)
        setattr(self._local, slot, (os.getpid(), driver))
        return driver

    def _connect_args(self) -> dict[str, Any]:
        # Named in pg_stat_activity, unless the URL names the application itself.
        return {} if "application_name" in self.url.query else {"application_name": APP_NAME}

    def driver_connect(self, options: str | None = None) -> Any:
        """A new autocommit psycopg connection to the store (hot path, LISTEN)."""
        url = self.url.set(drivername="postgresql")
        extra = self._connect_args()
        if options:
            extra["options"] = options
        return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True, **extra)


class Listener:
    """Waits for a run to change: LISTEN/NOTIFY on Postgres, polling elsewhere.

    Every statement that finishes or suspends a run also sends ``pg_notify`` on the
    store's channel, so a waiter wakes at once instead of at its next poll. Without a
    LISTEN connection (SQLite, or the server went away) it polls, sleeping a little longer
    each time up to ``max_poll`` seconds.

    Example::

        with store.listener() as listener:
            while not done():
                listener.wait_for(run_id, timeout=0.5)
    """

    _local = threading.local()
    first_poll = 0.005
    max_poll = 0.25

    def __init__(self, connections: Connections, channel: str, namespace: str) -> None:
        self.connections = connections
        self.channel = channel
        self.namespace = namespace
        self.conn: Any = None
        self._pause = self.first_poll
        self._key = ""

    def __enter__(self) -> Listener:
        if not self.connections.is_postgres:
            return self
        conns: dict[str, Any] = getattr(self._local, "conns", None) or {}
        self._local.conns = conns
        # Keyed by pid: a forked child must not reuse (and later close) the parent's socket.
        self._key = f"{os.getpid()}|{self.connections.url}|{self.channel}"
        conn = conns.get(self._key)
        try:
            if conn is None or conn.closed:
                conn = self.connections.driver_connect()
                conn.execute(f'LISTEN "{self.channel}"')
                conns[self._key] = conn
            # Drop what arrived while nobody listened: the caller re-reads the row first.
            for _ in conn.notifies(timeout=0):
                pass
            self.conn = conn
        except Exception:  # noqa: BLE001 - no LISTEN connection: poll instead
            logger.warning("LISTEN unavailable; polling for run changes", exc_info=True)
            self._drop(conn)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self.conn is not None:
            self._drop(self.conn)

    def _drop(self, conn: Any) -> None:
        self._local.conns.pop(self._key, None)
        self.conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def wait_for(self, run_id: str, timeout: float) -> None:
        """Return when ``run_id`` may have changed, or after ``timeout`` seconds."""
        if self.conn is None:
            time.sleep(max(0.0, min(self._pause, timeout)))
            self._pause = min(self._pause * 2, self.max_poll)
            return
        wanted = f"{self.namespace}:{run_id}"
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                for note in self.conn.notifies(timeout=remaining, stop_after=1):
                    if note.payload == wanted:
                        return
        except Exception:  # noqa: BLE001 - the server went away: poll from now on
            logger.warning("LISTEN connection lost; polling for run changes", exc_info=True)
            self._drop(self.conn)
