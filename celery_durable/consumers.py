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
import time
from collections.abc import Iterable
from typing import Any

from celery import Celery

logger = logging.getLogger("celery_durable.consumers")

# How long a broadcast waits for the workers' replies (it waits that long every time).
INSPECT_TIMEOUT = 1.0


def consumed_queues(app: Celery, timeout: float = INSPECT_TIMEOUT) -> set[str] | None:
    """The names of the queues the running workers consume; None when no worker replied
    or the broadcast failed (unknown: the caller assumes they are consumed)."""
    try:
        replies: dict[str, Any] | None = app.control.inspect(timeout=timeout).active_queues()
    except Exception as exc:  # noqa: BLE001 - unknown, never fatal
        logger.debug("inspect active_queues failed: %r", exc)
        return None
    if not replies:
        return None
    return {
        queue["name"]
        for queues in replies.values()
        for queue in queues or ()
        if isinstance(queue, dict) and "name" in queue
    }


class QueueWatch:
    """The queues no worker consumes, from a snapshot renewed at most every ``ttl`` s."""

    def __init__(self, app: Celery, ttl: float) -> None:
        self.app, self.ttl = app, ttl
        self._consumed: set[str] | None = None
        self._taken = float("-inf")

    def unconsumed(self, queues: Iterable[str]) -> set[str]:
        """Those of ``queues`` that no running worker consumes (empty when unknown)."""
        wanted = set(queues)
        if not wanted:
            return set()
        if time.monotonic() - self._taken >= self.ttl:
            self._consumed = consumed_queues(self.app)
            self._taken = time.monotonic()
        if self._consumed is None:
            return set()
        return wanted - self._consumed
