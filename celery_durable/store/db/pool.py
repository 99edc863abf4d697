"""One pool of Postgres connections per process, shared by SQLAlchemy and the fast path.

A pool process of a worker runs one workflow at a time, so one connection serves all its
statements: the hot-path writes, the reads and transactions, and the lease heartbeat,
which *borrows* a connection (waits a moment for the busy one) instead of opening its own.

Example::

    engine = create_engine(url, poolclass=ProcessPool, isolation_level="AUTOCOMMIT")
    record = engine.pool.take()          # the psycopg fast path, without a pool proxy
    try:
        record.get_connection().execute("SELECT 1")
    finally:
        engine.pool.give_back(record)
    with borrowing():                    # a background thread: no connection of its own
        with engine.connect() as conn: ...
"""

from __future__ import annotations

import select as select_module
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.pool import ConnectionPoolEntry, Pool

try:  # the pool serves Postgres engines only; SQLite installs need no psycopg
    from psycopg.pq import TransactionStatus
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    TransactionStatus = None  # type: ignore[assignment,misc]

_flags = threading.local()


@contextmanager
def borrowing() -> Iterator[None]:
    """Checkouts in this block wait for one of the pool's connections instead of opening one."""
    previous = getattr(_flags, "borrowing", False)
    _flags.borrowing = True
    try:
        yield
    finally:
        _flags.borrowing = previous


def has_pending_input(driver: Any) -> bool:
    """An idle connection with input waiting was terminated by the server (restart, idle
    killer, ``pg_terminate_backend``): it must be replaced before it is used."""
    try:
        readable, _, _ = select_module.select([driver.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _restore_autocommit(record: Any) -> None:
    """A transaction (SQLAlchemy's READ COMMITTED ones) is over: back to autocommit, which
    the fast path relies on. SQLAlchemy resets it at checkin too, but not every 2.0 release
    does so before the connection is returned."""
    driver = record.dbapi_connection
    try:
        if driver.info.transaction_status != TransactionStatus.IDLE:  # given up midway
            driver.rollback()
        driver.autocommit = True
    except Exception:  # noqa: BLE001 - a connection in doubt is replaced
        record.invalidate()


class ProcessPool(Pool):
    """Connections of one process, last in first out; it grows to the number of threads
    that use the store at once, and keeps them.

    A borrowing checkout (``borrowing``) takes an idle connection, or waits up to
    ``borrow_timeout`` seconds for one to come back; only then does it open a temporary one,
    closed on return. A connection lent to a borrower comes back after one statement, so
    other checkouts wait for it (as long) rather than open another. Connections come back
    in autocommit mode, and every checkout checks that the server has not dropped the
    connection (no round trip): a dropped one is replaced.
    """

    borrow_timeout = 0.25

    def __init__(self, creator: Any, **kwargs: Any) -> None:
        super().__init__(creator, **kwargs)
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[Any] = []
        self._size = 0
        self._lent: set[int] = set()  # ids of the pool's records a borrower holds
        self._temporary: set[int] = set()  # ids of records opened for a borrower, not kept

    @property
    def size(self) -> int:
        """Connections the pool keeps (idle or checked out), temporary ones excluded."""
        return self._size

    def take(self) -> Any:
        """A connection record for this thread; ``give_back`` it. ``get_connection()`` on
        it returns the psycopg connection, reconnecting one that was invalidated."""
        borrow = getattr(_flags, "borrowing", False)
        with self._cond:
            # A borrower waits for a connection of the pool; anyone waits for one lent to a
            # borrower, which gives it back after one statement.
            if not self._idle and (self._lent or (borrow and self._size)):
                self._cond.wait_for(lambda: self._idle, self.borrow_timeout)
            if self._idle:
                record = self._idle.pop()
                if borrow:
                    self._lent.add(id(record))
            else:
                record = None
                if not borrow:
                    self._size += 1
        if record is not None:
            driver = record.dbapi_connection
            if driver is not None and has_pending_input(driver):
                record.invalidate()  # get_connection() reconnects
            return record
        try:
            record = self._create_connection()
        except BaseException:
            if not borrow:
                with self._cond:
                    self._size -= 1
            raise
        if borrow:
            with self._cond:
                self._temporary.add(id(record))
        return record

    def give_back(self, record: Any) -> None:
        driver = record.dbapi_connection
        if driver is not None and not driver.autocommit:
            _restore_autocommit(record)
        with self._cond:
            temporary = id(record) in self._temporary
            if temporary:
                self._temporary.discard(id(record))
            else:
                self._lent.discard(id(record))
                self._idle.append(record)
                self._cond.notify()
        if temporary:
            record.close()

    # -- the Pool interface: SQLAlchemy's checkouts and checkins ---------------------------

    def _do_get(self) -> ConnectionPoolEntry:
        record: ConnectionPoolEntry = self.take()
        return record

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        self.give_back(record)

    def recreate(self) -> ProcessPool:
        return self.__class__(
            self._creator,
            recycle=self._recycle,
            echo=self.echo,
            logging_name=self._orig_logging_name,
            reset_on_return=self._reset_on_return,
            pre_ping=self._pre_ping,
            _dispatch=self.dispatch,
            dialect=self._dialect,
        )

    def dispose(self) -> None:
        """Close the idle connections (SQLAlchemy then replaces the pool; a connection
        checked out meanwhile is closed when garbage collected)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._size -= len(idle)
        for record in idle:
            record.close()

    def status(self) -> str:
        return f"ProcessPool size={self._size} idle={len(self._idle)}"
