"""Testing helpers: workflows run eagerly (in-process, Celery's ``task_always_eager``) on
the test database, with signals, fan-out, and timers moved by a clock the test holds.

With pytest-django, in ``conftest.py``::

    from celery_durable.contrib.django.testing import durable_eager  # a fixture

    def test_approval(durable_eager):
        handle = approval.delay(7)               # runs now, up to its first wait
        handle.signal("approved", {"by": "ann"})  # the body goes on at once
        durable_eager.clock.advance(3600)        # its hour-long timer is due: it runs
        assert handle.get() == "shipped"

Without pytest: ``with eager_workflows() as kit:`` in a ``TransactionTestCase``.

Eager runs write through the store's own connections, which commit: a start does not join
the test's transaction, so the fixture uses pytest-django's ``transactional_db`` (the
tables are flushed after each test), and so must a Django test use ``TransactionTestCase``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery_durable.contrib.django import transactions
from celery_durable.contrib.django.setup import durables
from celery_durable.testing import Clock, EagerWorkflows
from celery_durable.testing import eager_workflows as eager_durables

__all__ = ["Clock", "EagerWorkflows", "durable_eager", "eager_workflows"]


@contextmanager
def eager_workflows() -> Iterator[EagerWorkflows]:
    """Run the project's workflows in-process on the current (test) database."""
    bound = durables()
    for durable in bound:
        durable.runtime.reopen()  # the test runner has moved DATABASES to the test database
    with transactions.not_joining():
        try:
            with eager_durables(*bound) as kit:
                yield kit
        finally:
            for durable in bound:
                durable.runtime.reopen()


try:
    import pytest
except ImportError:  # pragma: no cover - only a test process imports this module
    pass
else:

    @pytest.fixture
    def durable_eager(transactional_db: Any) -> Iterator[EagerWorkflows]:
        """pytest-django: the project's workflows run eagerly on the test database."""
        with eager_workflows() as kit:
            yield kit
