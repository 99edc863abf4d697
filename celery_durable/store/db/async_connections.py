"""The store's connections for asyncio callers: psycopg's ``AsyncConnection``, a few per
event loop, and one LISTEN connection per loop shared by every run awaited on it.

An asyncio client (``await handle.aget()``) must never block its loop on a socket. Each
event loop that reads the store gets up to ``READERS`` connections for reads (the hot
statements compiled once, as ``Connections.one`` sends them) and, where LISTEN works, one
LISTEN connection whose task hands each notification to the runs waited for on that loop.
They are made on first use and reused by every later call on the loop; its task closes
them when it is cancelled (``asyncio.run`` cancels it as the loop ends) or the store is
disposed. Without LISTEN (SQLite, PgBouncer without ``listen_url``, a lost connection) a
waiter polls with ``asyncio.sleep``, as ``Listener`` polls with ``time.sleep``.

Example::

    adb = AsyncConnections(connections, "durable_events", "default")
    row = await adb.one(statement, {"p_run_id": run_id})
    async with adb.watching(run_id) as changes:
        await changes.wait(timeout=10)     # a NOTIFY for the run, or 10 s
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from celery_durable.store.db.connections import Connections
from celery_durable.store.db.listener import Listener

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]

logger = logging.getLogger("celery_durable.store")

# Reads of one loop at the same moment: more wait for a free one. Each read is one short
# statement, so a few serve a loop awaiting thousands of runs.
READERS = 4
# The longest pause between two tries to get the LISTEN connection back.
MAX_RELISTEN = 5.0
# How long a connect may take before it counts as an outage (unless the URL says).
CONNECT_TIMEOUT = 10

_ALL: weakref.WeakSet[AsyncConnections] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for each in list(_ALL):
        each._after_fork_in_child()


os.register_at_fork(after_in_child=_forget_after_fork)


class Changes:
    """What a waiter for one run waits on: a notification for it where LISTEN works, a
    growing pause otherwise (``Listener.first_poll`` up to ``Listener.max_poll``)."""

    def __init__(self, loop_connections: _LoopConnections | None) -> None:
        self._here = loop_connections
        self._event = asyncio.Event()
        self._pause = Listener.first_poll

    @property
    def notified(self) -> bool:
        """Whether a notification wakes this waiter now (False: it polls)."""
        return self._here is not None and self._here.listening

    async def wait(self, timeout: float) -> None:
        """Return when the run may have changed, or after ``timeout`` seconds."""
        timeout = max(0.0, timeout)
        if self.notified:
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
        else:
            await asyncio.sleep(min(self._pause, timeout))
            self._pause = min(self._pause * 2, Listener.max_poll)
        # Set again by any notification from now on, while the caller reads the run.
        self._event.clear()


class _LoopConnections:
    """One event loop's connections: readers and, where LISTEN works, its LISTEN task."""

    def __init__(self, owner: AsyncConnections, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner
        self.loop = loop
        self.idle: list[Any] = []
        self.readers = asyncio.Semaphore(READERS)
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.listening = False
        self.listen_conn: Any = None
        # Set once the first LISTEN has been tried: a waiter reads the run only after it,
        # so no notification can fall between its read and the LISTEN.
        self.tried = asyncio.Event()
        self.task = loop.create_task(self._keep(), name="celery_durable-listen")

    async def one(self, sql: bytes, values: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The first row of ``sql`` on a reader; a reader that died is replaced and the
        read sent once more (a read is idempotent)."""
        async with self.readers:
            for last_try in (False, True):
                conn = self.idle.pop() if self.idle else None
                try:
                    if conn is None:
                        conn = await self.owner.connect(listen=False)
                    async with psycopg.AsyncRawCursor(conn) as cursor:
                        await cursor.execute(sql, values)
                        row = await cursor.fetchone()
                except psycopg.OperationalError:
                    await _close(conn)
                    if last_try:
                        raise
                    continue
                except BaseException:
                    await _close(conn)  # cancelled mid-statement: its state is unknown
                    raise
                self.idle.append(conn)
                return row
        raise AssertionError("unreachable")

    async def _keep(self) -> None:
        """Hold the loop's connections until cancelled; where LISTEN works, LISTEN and
        wake the waiters of each notified run, getting the connection back if it's lost."""
        pause = Listener.first_poll
        try:
            if not self.owner.connections.can_listen:
                self.tried.set()
                await asyncio.Event().wait()  # until cancelled: then the readers close
            while True:
                try:
                    conn = self.listen_conn = await self.owner.connect(listen=True)
                    await conn.execute(f'LISTEN "{self.owner.channel}"')
                    self.listening, pause = True, Listener.first_poll
                    self._wake_all()  # what changed while nobody listened: read it again
                    self.tried.set()
                    async for note in conn.notifies():
                        for event in self.waiters.get(note.payload, ()):
                            event.set()
                except Exception:  # noqa: BLE001 - no LISTEN connection: waiters poll
                    logger.warning(
                        "LISTEN unavailable; asyncio waiters poll for run changes", exc_info=True
                    )
                self.listening = False
                self._wake_all()
                self.tried.set()
                await _close(self.listen_conn)
                self.listen_conn = None
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_RELISTEN)
        finally:
            self.listening = False
            await self.close()

    def _wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()

    async def close(self) -> None:
        conns, self.idle = [self.listen_conn, *self.idle], []
        self.listen_conn = None
        for conn in conns:
            await _close(conn)

    def abandon(self) -> None:
        """Close the sockets of a loop that ended without cancelling its tasks (no loop
        left to await their close on)."""
        conns, self.idle = [self.listen_conn, *self.idle], []
        self.listen_conn = None
        for conn in conns:
            if conn is not None:
                with suppress(Exception):
                    conn.pgconn.finish()


async def _close(conn: Any) -> None:
    if conn is not None:
        with suppress(Exception):  # closing a broken connection
            await conn.close()


class AsyncConnections:
    """The async counterpart of one store's ``Connections``: reads and LISTEN for the
    event loops of this process (Postgres only; SQLite's waiters poll)."""

    def __init__(self, connections: Connections, channel: str, namespace: str) -> None:
        self.connections = connections
        self.channel = channel
        self.namespace = namespace
        self._loops: dict[asyncio.AbstractEventLoop, _LoopConnections] = {}
        self._lock = threading.Lock()  # loops of several threads
        _ALL.add(self)

    def _after_fork_in_child(self) -> None:
        # The parent's loops and sockets are not the child's: forget them, unclosed.
        self._loops = {}
        self._lock = threading.Lock()

    def _here(self) -> _LoopConnections:
        """The running loop's connections, made on its first call."""
        loop = asyncio.get_running_loop()
        mine = self._loops.get(loop)
        if mine is not None and not mine.task.done():
            return mine
        with self._lock:
            for ended in [other for other in self._loops if other.is_closed()]:
                self._loops.pop(ended).abandon()
            mine = self._loops[loop] = _LoopConnections(self, loop)
        return mine

    async def connect(self, *, listen: bool) -> Any:
        """A new autocommit ``AsyncConnection``: a reader to the store's URL (with the
        pool's keywords), or a LISTEN connection (to ``listen_url`` if set)."""
        conninfo, extra = self.connections.target(listen=listen)
        if "connect_timeout" not in conninfo:
            extra.setdefault("connect_timeout", CONNECT_TIMEOUT)
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **extra)

    async def one(self, stmt: Any, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run one read (a statement of the store's) on this loop's readers; its first row."""
        compiled = self.connections.compiled(stmt)
        return await self._here().one(compiled.sql, compiled.args(params))

    @asynccontextmanager
    async def watching(self, run_id: str) -> AsyncIterator[Changes]:
        """Wait for ``run_id`` to change, within the block: enter it before the first read
        of the run, so that no notification falls between that read and the wait."""
        if not self.connections.can_listen:
            yield Changes(None)
            return
        here = self._here()
        await here.tried.wait()
        changes = Changes(here)
        key = f"{self.namespace}:{run_id}"
        here.waiters.setdefault(key, set()).add(changes._event)
        try:
            yield changes
        finally:
            waiting = here.waiters.get(key)
            if waiting is not None:
                waiting.discard(changes._event)
                if not waiting:
                    del here.waiters[key]

    def listening_on_this_loop(self) -> bool:
        """Whether the running loop holds a LISTEN connection now (for the tests)."""
        mine = self._loops.get(asyncio.get_running_loop())
        return mine is not None and mine.listening

    def close(self) -> None:
        """Close every loop's connections: a running loop's task is cancelled (it closes
        them), an ended loop's sockets are closed here."""
        with self._lock:
            loops, self._loops = self._loops, {}
        for loop, mine in loops.items():
            if loop.is_closed():
                mine.abandon()
            elif loop.is_running():
                loop.call_soon_threadsafe(mine.task.cancel)
            else:
                mine.task.cancel()
                mine.abandon()
