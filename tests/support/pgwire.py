"""The Postgres protocol messages a store's pooled connection exchanges during an action:
what a test counts to show a write is one statement and one round trip."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg import pq

from celery_durable.store import Store


def trace_messages(store: Store, action: Callable[[], Any]) -> list[str]:
    """The protocol messages the pool's connection exchanged during ``action()``: the
    direction and the message's type ("F Execute", "B ReadyForQuery")."""
    return messages_in(trace_text(store, action))


def messages_in(text: str) -> list[str]:
    """A trace's messages, as ``trace_messages`` gives them."""
    fields = [line.split("\t") for line in text.splitlines()]
    return [f"{f[0]} {f[2]}" for f in fields if len(f) > 2]


def trace_text(store: Store, action: Callable[[], Any]) -> str:
    """The whole trace: each message's direction, length, type and content (a Parse's SQL,
    over several lines; a Bind's values)."""
    pool = store.db.pool
    record = pool.take()
    driver = record.get_connection()
    pool.give_back(record)
    with tempfile.NamedTemporaryFile("w+", suffix=".trace") as trace:
        driver.pgconn.trace(trace.fileno())
        driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            action()
        finally:
            driver.pgconn.untrace()
        text = Path(trace.name).read_text()
    assert pool.size == 1  # the action ran on the traced connection
    return text
