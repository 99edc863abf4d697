"""The database going away: named errors.

Outages are real: a port where nothing listens.
"""

from __future__ import annotations

import re
import socket

import psycopg
import pytest
from celery import Celery

from celery_durable import DatabaseUnavailable, Durable


def closed_port() -> int:
    """A port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_delay_with_the_database_down_raises_database_unavailable():
    """Bug: .delay() raised a raw psycopg.OperationalError."""
    port = closed_port()
    app = Celery("db-down", broker="memory://")  # never reached: nothing is stored
    durable = Durable(
        app,
        database_url=f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{port}/test",
        namespace="db-down",
    )

    @durable.workflow(name="shop.checkout")
    def checkout(order_id: int) -> int:
        return order_id

    for start, run_id in (
        (lambda: checkout.apply_async(args=(42,), workflow_id="order-42"), "order-42"),
        (lambda: checkout.delay(42), "[0-9a-f-]{36}"),  # a generated id, named too
    ):
        with pytest.raises(DatabaseUnavailable) as raised:
            start()
        message = str(raised.value)
        assert re.search(f"workflow shop\\.checkout run '{run_id}' was not started", message)
        assert f"the database postgresql+psycopg://postgres:***@127.0.0.1:{port}/test" in message
        assert "is unreachable" in message and "s3cret" not in message
        assert isinstance(raised.value.__cause__, psycopg.OperationalError)  # chained
        assert "Connection refused" in str(raised.value.__cause__)
    durable.store.dispose()
