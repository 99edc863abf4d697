"""Which queues some worker consumes: Celery's ``inspect().active_queues()``, asked only off
the hot path (the sweeper, before it publishes items again; ``durable show``).

An item published to a queue that no worker consumes waits in it, as any Celery task's
message would, until a worker of that queue starts. Publishing it again then only piles
copies up, so the sweeper asks first, and names the queue in a warning instead.

Example::

    watch = QueueWatch(app, ttl=60)
    watch.unconsumed({"gpu", "celery"})    # {"gpu"}: no worker replied consuming it
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from celery import Celery

logger = logging.getLogger("celery_durable.consumers")

# How long a broadcast waits for the workers' replies (it waits that long every time), and
# how long a caller waits for the answer at most: kombu retries a broadcast's publish
# without end while the broker is down, so the asking runs in a thread of its own.
INSPECT_TIMEOUT = 1.0
INSPECT_WAIT = 5.0


class Asking(threading.Thread):
    """One ``active_queues`` broadcast; ``answer`` once done (None: unknown)."""

    def __init__(self, app: Celery, timeout: float) -> None:
        super().__init__(name="celery_durable-inspect", daemon=True)
        self.app, self.timeout = app, timeout
        self.answer: set[str] | None = None

    def run(self) -> None:
        try:
            inspect = self.app.control.inspect(timeout=self.timeout)
            replies: dict[str, Any] | None = inspect.active_queues()
        except Exception as exc:  # noqa: BLE001 - unknown, never fatal
            logger.debug("inspect active_queues failed: %r", exc)
            return
        if replies:
            self.answer = {
                queue["name"]
                for queues in replies.values()
                for queue in queues or ()
                if isinstance(queue, dict) and "name" in queue
            }


def consumed_queues(app: Celery, wait: float = INSPECT_WAIT) -> set[str] | None:
    """The names of the queues the running workers consume; None when no worker replied,
    the broadcast failed or took longer than ``wait`` (unknown)."""
    asking = Asking(app, INSPECT_TIMEOUT)
    asking.start()
    asking.join(wait)
    return asking.answer


class QueueWatch:
    """The queues no worker consumes, from a snapshot renewed at most every ``ttl`` s."""

    def __init__(self, app: Celery, ttl: float) -> None:
        self.app, self.ttl = app, ttl
        self._consumed: set[str] | None = None
        self._taken = float("-inf")
        self._asking: Asking | None = None

    def unconsumed(self, queues: Iterable[str]) -> set[str]:
        """Those of ``queues`` that no running worker consumes (empty when unknown)."""
        wanted = set(queues)
        if not wanted:
            return set()
        if time.monotonic() - self._taken >= self.ttl:
            self._consumed = self._ask()
            self._taken = time.monotonic()
        if self._consumed is None:
            return set()
        return wanted - self._consumed

    def _ask(self) -> set[str] | None:
        if self._asking is not None and self._asking.is_alive():
            return None  # the last one still hangs (the broker is down): unknown
        self._asking = Asking(self.app, INSPECT_TIMEOUT)
        self._asking.start()
        self._asking.join(INSPECT_WAIT)
        return self._asking.answer
