"""Ids: every id celery_durable derives, in one place. A run's id is its Celery task id,
which AMQP carries as a shortstr (at most 255 bytes)."""

from __future__ import annotations

import os
import time
import uuid

# AMQP's correlation_id (Celery's task id) is a shortstr: at most 255 bytes.
MAX_ID_BYTES = 255

# The library's own tasks that carry a signal and a wake-up: the worker's delivery guard
# lets them through by name, whichever features are wired.
SIGNAL_TASK = "celery_durable.signal"
WAKE_TASK = "celery_durable.wake"


def time_ordered_id() -> str:
    """A UUID whose first 48 bits are the time in ms (the UUIDv7 layout).

    New runs then land at the right edge of the primary-key indexes instead of on random
    pages, which keeps inserts fast when the tables hold millions of finished runs.
    """
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
    value |= 0b10 << 62 | rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def derived_id(text: str) -> str:
    """``text`` as a task or run id, or a uuid5 of it when longer than 255 bytes."""
    if len(text.encode("utf-8")) <= MAX_ID_BYTES:
        return text
    return str(uuid.uuid5(uuid.NAMESPACE_URL, text))
