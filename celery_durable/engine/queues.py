"""Which queues some worker consumes: Celery's ``inspect().active_queues()``, asked only off
the hot path (the sweeper, before it publishes items again; ``durable show``); and how many
pool processes the fleet has (``inspect().stats()``, for ``batch_size="auto"``).

An item published to a queue that no worker consumes waits in it, as any Celery task's
message would, until a worker of that queue starts. Publishing it again then only piles
copies up, so the sweeper asks first, and names the queue in a warning instead.

Example::

    watch = QueueWatch(app, ttl=60)
    watch.unconsumed({"gpu", "celery"})    # {"gpu"}: no worker replied consuming it
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from celery import Celery

logger = logging.getLogger("celery_durable.consumers")

# How long a broadcast waits for the workers' replies (it waits that long every time), and
# how long a caller waits for the answer at most: kombu retries a broadcast's publish
# without end while the broker is down, so the asking runs in a thread of its own.
INSPECT_TIMEOUT = 1.0
INSPECT_WAIT = 5.0
# How long an unknown answer (a worker under load replied after INSPECT_TIMEOUT, a broker
# hiccup) keeps the last known one: a queue known to be unconsumed still holds the items'
# messages, so copies published on the strength of one late reply would only pile up there.
KEEP_KNOWN = 60.0


class Asking(threading.Thread):
    """One ``inspect`` broadcast (``active_queues`` by default); ``answer`` once done
    (None: unknown)."""

    def __init__(
        self,
        app: Celery,
        timeout: float,
        method: str = "active_queues",
        read: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        super().__init__(name="celery_durable-inspect", daemon=True)
        self.app, self.timeout, self.method = app, timeout, method
        self.read = read or _queue_names
        self.answer: Any = None

    def run(self) -> None:
        try:
            inspect = self.app.control.inspect(timeout=self.timeout)
            replies: dict[str, Any] | None = getattr(inspect, self.method)()
        except Exception as exc:  # noqa: BLE001 - unknown, never fatal
            logger.debug("inspect %s failed: %r", self.method, exc)
            return
        if replies:
            self.answer = self.read(replies)


def _queue_names(replies: dict[str, Any]) -> set[str]:
    return {
        queue["name"]
        for queues in replies.values()
        for queue in queues or ()
        if isinstance(queue, dict) and "name" in queue
    }


def _pool_processes(replies: dict[str, Any]) -> int | None:
    """The pool processes of every worker that replied to ``stats`` (None: none said)."""
    sizes = [
        reply.get("pool", {}).get("max-concurrency")
        for reply in replies.values()
        if isinstance(reply, dict) and isinstance(reply.get("pool"), dict)
    ]
    total = sum(size for size in sizes if isinstance(size, int) and size > 0)
    return total or None


class FleetWatch:
    """How many pool processes the running workers have in all, from ``inspect().stats()``
    (about a second, so asked at most every ``ttl`` s, and only by ``cd.map(...,
    batch_size="auto")``); this worker's own concurrency while that is unknown."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._known: int | None = None
        self._taken = float("-inf")

    def concurrency(self, ttl: float) -> int:
        if self.app.conf.task_always_eager:
            return self._local()
        if time.monotonic() - self._taken >= ttl:
            asking = Asking(self.app, INSPECT_TIMEOUT, "stats", _pool_processes)
            asking.start()
            asking.join(INSPECT_WAIT)
            self._known, self._taken = asking.answer, time.monotonic()
        return self._known or self._local()

    def _local(self) -> int:
        configured = self.app.conf.worker_concurrency
        return configured if isinstance(configured, int) and configured > 0 else os.cpu_count() or 1


def consumed_queues(app: Celery, wait: float = INSPECT_WAIT) -> set[str] | None:
    """The names of the queues the running workers consume; None when no worker replied,
    the broadcast failed or took longer than ``wait`` (unknown)."""
    asking = Asking(app, INSPECT_TIMEOUT)
    asking.start()
    asking.join(wait)
    return asking.answer


class QueueWatch:
    """The queues no worker consumes, from a snapshot renewed at most every ``ttl`` s; an
    unknown answer keeps the last known snapshot up to ``keep_known`` s old."""

    def __init__(self, app: Celery, ttl: float, keep_known: float = KEEP_KNOWN) -> None:
        self.app, self.ttl, self.keep_known = app, ttl, keep_known
        self._consumed: set[str] | None = None
        self._taken = float("-inf")
        self._known_at = float("-inf")
        self._asking: Asking | None = None

    def unconsumed(self, queues: Iterable[str]) -> set[str]:
        """Those of ``queues`` that no running worker consumes (empty when unknown)."""
        wanted = set(queues)
        if not wanted:
            return set()
        if time.monotonic() - self._taken >= self.ttl:
            answer = self._ask()
            self._taken = time.monotonic()  # after the ask, which can wait INSPECT_WAIT
            if answer is not None:
                self._consumed, self._known_at = answer, self._taken
            elif self._taken - self._known_at >= self.keep_known:
                self._consumed = None
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
