"""Waiting for a run to change: LISTEN/NOTIFY on Postgres, polling elsewhere.

Example::

    with store.listener() as listener:
        listener.wait_for(run_id, timeout=0.5)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType
from typing import Any

from celery_durable.store.db.connections import Connections

logger = logging.getLogger("celery_durable.store")


class Listener:
    """Waits for a run to change: LISTEN/NOTIFY on Postgres, polling elsewhere.

    Every statement that finishes or suspends a run also sends ``pg_notify`` on the
    store's channel, so a waiter wakes at once instead of at its next poll. Without a
    LISTEN connection (SQLite, PgBouncer without ``listen_url``, or the server went away)
    it polls, sleeping a little longer each time up to ``max_poll`` seconds.

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

    @classmethod
    def close_cached(cls, connections: Connections) -> None:
        """Close this thread's LISTEN connections to ``connections``' database (a disposed
        store must hold none: a test runner drops its database after the tests)."""
        conns: dict[str, Any] = getattr(cls._local, "conns", None) or {}
        mine = f"{os.getpid()}|{connections.url}|"
        for key in [k for k in conns if k.startswith(mine)]:
            conn = conns.pop(key)
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def __enter__(self) -> Listener:
        if not self.connections.can_listen:
            return self
        conns: dict[str, Any] = getattr(self._local, "conns", None) or {}
        self._local.conns = conns
        # Keyed by pid: a forked child must not reuse (and later close) the parent's socket.
        self._key = f"{os.getpid()}|{self.connections.url}|{self.channel}"
        conn = conns.get(self._key)
        try:
            if conn is None or conn.closed:
                conn = self.connections.listen_connection()
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
