"""What a test's workers leave behind, cleared when the test ends: the session's queues and
table prefix are shared by every test of a session, so a message or a run one test left
would be run by the next test's workers.

A test may well leave some: a SIGKILLed worker's message goes back to the queue
(RabbitMQ) after the test saw its run finish another way, a duplicate delivery waits in
the queue, a test that failed half-way leaves its run PENDING behind a Redis ``block:``
key. The next test's worker then runs it or, with a database it can't reach, delivers it
again and again (``tests/integration/test_outages.py`` counts those log lines).

Example::

    leave_nothing_behind(basic.durable, since=began, queues=[QUEUE], key=key)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from celery_durable import WorkflowAlreadyCompleted, WorkflowNotFound

from .services import BROKER_URL, redis_client

ACTIVE = ("pending", "running", "waiting")
# How long a killed worker's broker connection may take to close (its unacked messages
# are requeued then, on RabbitMQ), before the purge goes ahead anyway.
CONSUMERS_GONE_WITHIN = 5.0


def leave_nothing_behind(
    durable: Any,
    since: float,
    queues: Sequence[str],
    key: str | None = None,
) -> None:
    """Unblock the test's steps (``block:{key}*``), cancel the runs it started (created
    at ``since`` or later) that are still active, and purge ``queues``: call it once the
    test's workers are dead."""
    if key is not None:
        rds = redis_client()
        try:
            for name in list(rds.scan_iter(f"block:{key}*")):
                rds.delete(name)
        finally:
            rds.close()
    cancel_runs_since(durable, since)
    purge_queues(queues)


def cancel_runs_since(durable: Any, since: float) -> int:
    """Cancel every active run created at ``since`` or later; returns how many."""
    cancelled, after = 0, None
    while True:
        page = durable.list_runs(ACTIVE, since=since, limit=200, after=after)
        for run in page.runs:
            try:
                durable.get_handle(run.id).cancel("left behind by a finished test")
                cancelled += 1
            except (WorkflowAlreadyCompleted, WorkflowNotFound):
                pass  # it finished meanwhile
        if page.cursor is None:
            return cancelled
        after = page.cursor


def purge_queues(queues: Sequence[str]) -> None:
    """Drop the messages waiting in ``queues``, once no consumer is left on them (or after
    ``CONSUMERS_GONE_WITHIN``: another test's worker may consume one of them)."""
    from kombu import Connection

    with Connection(BROKER_URL, connect_timeout=5) as conn:
        channel = conn.default_channel
        deadline = time.monotonic() + CONSUMERS_GONE_WITHIN
        for name in queues:
            try:
                while _consumers(channel, name) and time.monotonic() < deadline:
                    time.sleep(0.05)
                channel.queue_purge(name)
            except Exception:  # noqa: BLE001 - a queue that never existed closes the channel
                channel = conn.channel()


def _consumers(channel: Any, name: str) -> int:
    declared = channel.queue_declare(name, passive=True)
    return int(getattr(declared, "consumer_count", 0) or 0)
