"""Waiting for a run to change: LISTEN/NOTIFY on Postgres, polling elsewhere.

Every statement that finishes or suspends a run also sends ``pg_notify`` on the store's
channel, so a waiter wakes at once instead of at its next poll.

Example::

    with durable.waiter() as waiter:
        while not done():
            waiter.wait_for(run_id, timeout=0.5)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType
from typing import Any

from .store import Store

logger = logging.getLogger("celery_durable.waiting")


class Waiter:
    """Polls, sleeping a little longer each time up to the caller's interval."""

    def __init__(self) -> None:
        self._pause = 0.005

    def __enter__(self) -> Waiter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def wait_for(self, run_id: str, timeout: float) -> None:
        time.sleep(max(0.0, min(self._pause, timeout)))
        self._pause = min(self._pause * 2, 0.25)


class NotifyWaiter(Waiter):
    """Blocks on a LISTENing psycopg connection, one kept per thread."""

    _local = threading.local()

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.conn: Any = None
        self._key = ""

    def __enter__(self) -> NotifyWaiter:
        conns: dict[str, Any] = getattr(self._local, "conns", None) or {}
        self._local.conns = conns
        # Keyed by pid: a forked child must not reuse (and later close) the parent's socket.
        self._key = f"{os.getpid()}|{self.store.url}|{self.store.notify_channel}"
        conn = conns.get(self._key)
        try:
            if conn is None or conn.closed:
                conn = self.store.driver_connect()
                conn.execute(f'LISTEN "{self.store.notify_channel}"')
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
        if exc is not None:
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
        if self.conn is None:
            super().wait_for(run_id, timeout)
            return
        wanted = f"{self.store.namespace}:{run_id}"
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
