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
from celery_durable.durable import Durable


class Clock:
    """The durable timers' clock in a test: ``advance(seconds)`` moves every timer of the
    project's namespaces that far (waits, sleeps, signal timeouts, workflow deadlines), then
    sweeps, so the runs now due go on, in-process. The database's clock is not touched."""

    def __init__(self, bound: list[Durable]) -> None:
        self._bound = bound

    def advance(self, seconds: float) -> int:
        """Returns the runs woken."""
        if seconds < 0:
            raise ValueError(f"advance(seconds): a clock only goes forward, got {seconds!r}")
        woken = 0
        for durable in self._bound:
            durable.store.bring_timers_forward(seconds)
            woken += durable.sweep_once()
        return woken


class EagerWorkflows:
    """What ``eager_workflows`` yields: the project's Durable instances and their clock."""

    def __init__(self, bound: list[Durable]) -> None:
        self.durables = bound
        self.clock = Clock(bound)

    @property
    def durable(self) -> Durable:
        """The project's Durable (the first, if it has several)."""
        return self.durables[0]


@contextmanager
def eager_workflows() -> Iterator[EagerWorkflows]:
    """Run the project's workflows in-process on the current (test) database."""
    bound = durables()
    apps = {id(d.app): d.app for d in bound}.values()
    saved = [(app, app.conf.task_always_eager) for app in apps]
    for app in apps:
        app.conf.task_always_eager = True
    for durable in bound:
        durable.runtime.reopen()  # the test runner has moved DATABASES to the test database
    with transactions.not_joining():
        try:
            yield EagerWorkflows(bound)
        finally:
            for durable in bound:
                durable.runtime.reopen()
            for app, eager in saved:
                app.conf.task_always_eager = eager


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
