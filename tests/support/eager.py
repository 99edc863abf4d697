"""A Durable that runs workflows in-process (Celery's eager mode) on the session's tables,
under a namespace of its own: for tests of what a body does, without a worker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from celery_durable import Durable, WorkflowFailed, WorkflowHandle
from tests.support.services import PG_URL, unique


@contextmanager
def eager_durable(name: str, table_prefix: str, **settings: Any) -> Iterator[Durable]:
    app = Celery(name, broker="memory://")
    app.conf.task_always_eager = True
    durable = Durable(
        app,
        database_url=PG_URL,
        table_prefix=table_prefix,
        namespace=unique(f"ns-{name}-"),
        **settings,
    )
    try:
        yield durable
    finally:
        durable.runtime.store.dispose()


def failure_of(handle: WorkflowHandle) -> WorkflowFailed:
    """The WorkflowFailed a run that fails for good raises from ``get()``."""
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=10)
    return failed.value
