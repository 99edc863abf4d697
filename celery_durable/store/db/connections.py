"""Connections to the store: one pool per process, the psycopg fast path, LISTEN.

Prefork children must not share the parent's sockets, so the engine is created lazily per
process and forgotten (not closed) in a forked child. Its pool (``ProcessPool``) is
the only source of connections: SQLAlchemy's reads and transactions, the hot-path
statements (compiled once, sent straight to psycopg) and the lease heartbeat all use it, so
a process holds one connection per thread that talks to the store at the same moment (a
prefork pool process: one). A LISTEN connection is opened only by a process that waits on
a handle.

Behind PgBouncer in transaction pooling mode (``pgbouncer=True``) no connection keeps state
between transactions: no server-side prepared statements, no session ``SET``, and LISTEN
either goes to ``listen_url`` (a direct connection to Postgres) or becomes polling.

Example::

    db = Connections(make_url("postgresql+psycopg://postgres@127.0.0.1/test"))
    with db.transaction() as conn:
        conn.execute(statement)
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, true
from sqlalchemy.engine import URL, make_url

from celery_durable.core.redact import mask_urls
from celery_durable.errors import ConfigurationError
from celery_durable.store.db.dialect import dialect_of
from celery_durable.store.db.losses import ConnectionLosses
from celery_durable.store.db.outage import describe
from celery_durable.store.db.pool import ProcessPool, borrowing
from celery_durable.store.db.raw import RawStatement, compile_raw, positional_dialect
from celery_durable.store.db.sqlite import own_engine, shared_engine

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg.rows import namedtuple_row
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]
    namedtuple_row = None  # type: ignore[assignment]

logger = logging.getLogger("celery_durable.store")

APP_NAME = "celery_durable"

_ALL: weakref.WeakSet[Connections] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for connections in list(_ALL):
        connections._after_fork_in_child()


os.register_at_fork(after_in_child=_forget_after_fork)


def require_driver(url: URL) -> None:
    """A Postgres URL needs psycopg 3: say which extra installs it."""
    if url.get_backend_name() == "postgresql" and psycopg is None:
        raise ConfigurationError(
            f"durable_database_url={describe(url)!r} needs the "
            'psycopg driver: pip install "celery-durable[postgres]"'
        )


def parse_url(url: str) -> Any:
    """Parse ``durable_database_url``; an unsupported or misspelt one names the fix."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises several types here
        raise ConfigurationError(
            f"durable_database_url={mask_urls(url)!r} is not a valid URL: {mask_urls(str(exc))}"
        ) from None
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg2", "postgres+psycopg"):
        raise ConfigurationError(
            f"durable_database_url={mask_urls(url)!r}: use a postgresql+psycopg:// URL "
            "(celery_durable talks to Postgres through psycopg 3)"
        )
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(
            f"durable_database_url={mask_urls(url)!r}: only postgresql+psycopg (psycopg 3) "
            "and sqlite are supported"
        )
    require_driver(parsed)
    return parsed


def parse_listen_url(url: str) -> URL | None:
    """``durable_listen_url``: empty (LISTEN where the store is), or a Postgres URL."""
    if not url:
        return None
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - SQLAlchemy raises several types here
        raise ConfigurationError(
            f"durable_listen_url={mask_urls(url)!r} is not a valid URL"
        ) from None
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"durable_listen_url={mask_urls(url)!r}: use a postgresql+psycopg:// URL of the "
            "Postgres server itself (LISTEN does not work through PgBouncer's transaction pooling)"
        )
    require_driver(parsed)
    return parsed


def relaxed_commit(stmt: Any) -> Any:
    """``stmt`` whose own transaction commits without waiting for the WAL flush.

    ``SET LOCAL synchronous_commit = off`` as a condition of the statement itself
    (``set_config(..., is_local => true)``): Postgres evaluates it for each row the statement
    changes, and reads the setting at commit, so a statement that writes commits
    asynchronously. No extra statement or round trip, no session state (PgBouncer's
    transaction pooling keeps it), and the setting ends with the transaction.
    """
    return stmt.where(func.set_config("synchronous_commit", "off", true()) == "off")


_CURSOR = "celery_durable.cursor"


def _cursor_of(record: Any) -> psycopg.RawCursor[Any]:
    """The hot path's cursor of a pooled connection, made once per connection: a cursor
    per statement costs as much Python as adapting its parameters."""
    driver = record.get_connection()
    cursor: psycopg.RawCursor[Any] | None = record.info.get(_CURSOR)
    if cursor is None or cursor.connection is not driver or cursor.closed:
        cursor = record.info[_CURSOR] = psycopg.RawCursor(driver)
    return cursor


def _recover(record: Any) -> None:
    """After a failed statement: roll back what it left open, or drop a broken connection."""
    driver = record.dbapi_connection
    if driver is None:
        return
    try:
        if driver.closed or driver.broken:
            record.invalidate()
            return
        status = driver.info.transaction_status
        if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            driver.rollback()
        elif status != TransactionStatus.IDLE:  # interrupted mid-statement
            record.invalidate()
    except Exception:  # noqa: BLE001 - any doubt: a new connection next time
        record.invalidate()


class Connections:
    """The engine (one pool per process), the hot path and transactions of one store.

    ``pgbouncer``: the URL goes through PgBouncer in transaction pooling mode.
    ``listen_url``: where LISTEN connects (default: ``url``, unless ``pgbouncer``: polling).
    """

    def __init__(self, url: URL, *, pgbouncer: bool = False, listen_url: URL | None = None) -> None:
        self.url = url
        self.dialect = dialect_of(url.get_backend_name())
        # The engine, its pool and its fast path are psycopg's (the dialect answers what
        # the SQL may do; this, how to connect).
        self.is_postgres = self.dialect.name == "postgresql"
        self.pgbouncer = pgbouncer
        self.listen_url = listen_url
        self._engine: Engine | None = None
        self._compiled: dict[tuple[int, bool], RawStatement] = {}
        self._pid = -1
        self._lock = threading.Lock()
        self.losses = ConnectionLosses()
        _ALL.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock at fork time: the child gets a fresh one,
        # and must not touch the parent's pooled sockets (psycopg never closes them on GC).
        self._lock = threading.Lock()
        if self._engine is not None:
            self._engine.dispose(close=False)
        self._engine = None

    @property
    def engine(self) -> Engine:
        """This process's engine: prefork children must not share the parent's sockets. On
        SQLite, the host framework's connection while its transaction holds the file."""
        if not self.is_postgres and (shared := shared_engine(self.url)) is not None:
            return shared
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

    @property
    def pool(self) -> ProcessPool:
        """This process's Postgres connections (SQLAlchemy's and the hot path's)."""
        pool = self.engine.pool
        assert isinstance(pool, ProcessPool)
        return pool

    def connect_args(self) -> dict[str, Any]:
        """psycopg keywords of every store connection (an engine of your own can use them)."""
        args: dict[str, Any] = {}
        if not self.is_postgres:
            return args
        if "application_name" not in self.url.query:
            args["application_name"] = APP_NAME  # how the store shows in pg_stat_activity
        if self.pgbouncer:
            args["prepare_threshold"] = None  # PgBouncer < 1.21 can't pool prepared statements
        args.update(_keepalives(self.url))
        return args

    def _create_engine(self) -> Engine:
        if self.is_postgres:
            engine = create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                poolclass=ProcessPool,
                pool_reset_on_return=None,
                connect_args=self.connect_args(),
            )
            # Every broken pooled connection ends invalidated (the hot path's _recover,
            # SQLAlchemy's disconnect handling): the liveness path's guard.
            event.listen(engine, "invalidate", lambda *_: self.losses.note())
            return engine
        return own_engine(self.url)

    @contextmanager
    def write(self, *, borrow: bool = False) -> Iterator[Connection]:
        """One atomic statement (autocommit on Postgres, a transaction on SQLite).

        ``borrow``: a background task (the lease heartbeat) waits for a connection the
        process already has instead of opening another one.
        """
        if self.is_postgres:
            if borrow:
                with borrowing():
                    conn = self.engine.connect()
            else:
                conn = self.engine.connect()
            with conn:
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
        if self._engine is not None:
            self._engine.dispose(close=self._pid == os.getpid())
            self._engine = None

    def one(
        self, stmt: Any, params: dict[str, Any], *, retry: bool = False, relaxed: bool = False
    ) -> tuple[Any, ...] | None:
        """Run one hot-path statement and return its first row as a tuple (or None).

        On Postgres the statement goes straight to psycopg, compiled once, on a connection
        of the process's pool: SQLAlchemy's per-execute work and pool proxy would cost a
        good part of a step's write. SQLite takes the regular path, in a BEGIN IMMEDIATE
        transaction. ``retry``: the statement is idempotent (fenced, or insert-or-verify),
        so a connection that died (server restart, idle kill) is replaced and the
        statement sent once more. ``relaxed``: an UPDATE or DELETE that commits without
        waiting for the WAL flush (``relaxed_commit``): still one statement.
        """
        if not self.is_postgres:
            with self.write() as conn:
                row = conn.execute(stmt, params).first()
                return None if row is None else tuple(row)
        compiled = self.compiled(stmt, relaxed)
        sql, values = compiled.sql, compiled.args(params)
        pool = self.pool
        for last_try in (not retry, True):
            record = pool.take()
            try:
                cursor = _cursor_of(record)
                cursor.execute(sql, values)
                return cursor.fetchone()  # type: ignore[no-any-return]
            except psycopg.OperationalError:
                _recover(record)
                if last_try:
                    raise
            except BaseException:
                _recover(record)
                raise
            finally:
                pool.give_back(record)
        raise AssertionError("unreachable")

    def compiled(self, stmt: Any, relaxed: bool = False) -> RawStatement:
        """The statement compiled once, encoded, with ``$n`` placeholders (``db/raw.py``:
        psycopg would re-parse a long one's text on every execute)."""
        compiled = self._compiled.get((id(stmt), relaxed))
        if compiled is None:
            dialect = positional_dialect(self.engine.dialect)
            done = compile_raw(relaxed_commit(stmt) if relaxed else stmt, dialect)
            compiled = self._compiled[(id(stmt), relaxed)] = done
        return compiled

    def pipeline(self, record: Any, statements: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
        """Send ``statements`` (SQLAlchemy statements, or "BEGIN"/"COMMIT") on ``record``'s
        connection in one round trip (psycopg's pipeline mode); each one's first row (a
        named tuple) or None. On any error what they left open is rolled back."""
        driver = record.get_connection()
        cursors = []
        try:
            with driver.pipeline():
                for stmt, values in statements:
                    cursor = psycopg.RawCursor(driver, row_factory=namedtuple_row)
                    if isinstance(stmt, str):
                        cursor.execute(stmt)
                    else:
                        compiled = self.compiled(stmt)
                        cursor.execute(compiled.sql, compiled.args(values))
                    cursors.append(cursor)
            return [c.fetchone() if c.description is not None else None for c in cursors]
        except BaseException:
            _recover(record)
            raise

    def transaction_pipeline(self, statements: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
        """``statements`` in one transaction and one round trip (BEGIN ... COMMIT); their
        first rows. Like ``one(retry=True)``: a connection that died is replaced and the
        whole transaction sent once more (its statements must be fenced or idempotent)."""
        for last_try in (False, True):
            record = self.pool.take()
            try:
                rows = self.pipeline(record, [("BEGIN", {}), *statements, ("COMMIT", {})])
                return rows[1:-1]
            except psycopg.OperationalError:
                if last_try:
                    raise
            finally:
                self.give_back(record)
        raise AssertionError("unreachable")

    def give_back(self, record: Any) -> None:
        """Return a record taken for ``pipeline``; a transaction left open is rolled back."""
        try:
            driver = record.dbapi_connection
            if driver is not None and driver.info.transaction_status != TransactionStatus.IDLE:
                _recover(record)
        finally:
            self.pool.give_back(record)

    @property
    def can_listen(self) -> bool:
        """LISTEN works: Postgres, and not through PgBouncer (unless ``listen_url``)."""
        return self.dialect.notifies and (self.listen_url is not None or not self.pgbouncer)

    def listen_connection(self) -> Any:
        """A new autocommit psycopg connection for LISTEN, outside the pool."""
        conninfo, extra = self.target(listen=True)
        return psycopg.connect(conninfo, autocommit=True, **extra)

    def target(self, *, listen: bool) -> tuple[str, dict[str, Any]]:
        """Where a connection outside the pool goes, and its psycopg keywords: for LISTEN
        (``listen``), ``listen_connection``'s; else a reader's, with the pool's keywords
        (the asyncio client's connections, ``async_connections``)."""
        if not listen:
            url = self.url.set(drivername="postgresql")
            return url.render_as_string(hide_password=False), self.connect_args()
        extra: dict[str, Any] = {}
        if self.pgbouncer and self.listen_url is None:
            extra["prepare_threshold"] = None
        return self._own_target(extra)

    def _own_connection(self, extra: dict[str, Any]) -> Any:
        """A new autocommit psycopg connection outside the pool (``_own_target``)."""
        conninfo, extra = self._own_target(extra)
        return psycopg.connect(conninfo, autocommit=True, **extra)

    def _own_target(self, extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A connection of one's own, to ``listen_url`` if set: client keepalives and the
        store's application name unless the URL sets them."""
        url = (self.listen_url or self.url).set(drivername="postgresql")
        extra = {**_keepalives(url), **extra}
        if "application_name" not in url.query:
            extra["application_name"] = APP_NAME
        if "options" in url.query:
            extra.pop("options", None)  # the URL's own server options win
        return url.render_as_string(hide_password=False), extra

    @property
    def holds_sessions(self) -> bool:
        """A connection of its own keeps a session (and its locks) on the server:
        Postgres, and not through PgBouncer (unless ``listen_url``, the server itself)."""
        return self.dialect.session_locks and (self.listen_url is not None or not self.pgbouncer)

    def session_connection(self) -> Any:
        """A new autocommit psycopg connection of its own, straight to the server, whose
        session ends within seconds of its host being cut off: the server probes the
        idle socket (the tcp_keepalives settings of the session), not only the client."""
        server = " ".join(f"-c tcp_keepalives_{name}={value}" for name, value in _SERVER_KEEPALIVES)
        extra: dict[str, Any] = {"options": server}
        if "connect_timeout" not in self.url.query:
            extra["connect_timeout"] = 5  # its watcher retries; it must not hang on a dead host
        return self._own_connection(extra)

    def execute_on(self, driver: Any, stmt: Any, params: dict[str, Any]) -> Any:
        """Run ``stmt`` on a psycopg connection of one's own; its first row (or None)."""
        compiled = self.compiled(stmt)
        with psycopg.RawCursor(driver) as cursor:
            cursor.execute(compiled.sql, compiled.args(params))
            return cursor.fetchone()


# TCP keepalive of every store connection (unless the URL sets its own): a connection to
# a server that went away fails within seconds, not after the kernel's two hours.
_CLIENT_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
# The server's side of a session connection: idle, interval, count (about 11 s in all).
_SERVER_KEEPALIVES = (("idle", 5), ("interval", 2), ("count", 3))


def _keepalives(url: URL) -> dict[str, Any]:
    if any(name in url.query for name in _CLIENT_KEEPALIVES):
        return {}
    return dict(_CLIENT_KEEPALIVES)
