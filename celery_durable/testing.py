"""Testing workflows without a worker: they run eagerly (in-process, Celery's
``task_always_eager``), and a clock the test holds fires their timers and deadlines.

With pytest, in ``conftest.py``::

    from celery_durable.testing import durable_eager  # a fixture: Celery's current app

    def test_approval(durable_eager):
        handle = approval.delay(7)                # runs now, up to its first wait
        handle.signal("approved", {"by": "ann"})  # the body goes on at once
        durable_eager.clock.advance(3600)         # its hour-long sleep is due: it runs
        assert handle.get() == "shipped"

Without pytest, or for another app than Celery's current one::

    with eager_workflows(durable) as kit:
        ...
        kit.clock.advance(60)

The database's clock can't be set, so the clock moves the timers instead: ``advance(s)``
brings every due time of the namespace's waiting runs (``cd.sleep``, a signal's timeout),
every deadline a wait recorded and every workflow deadline ``s`` seconds earlier, then
sweeps, so the runs now due go on in-process. Django projects use
``celery_durable.contrib.django.testing``, which does this on the test database.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from celery import current_app

from celery_durable.durable import Durable, durables_of
from celery_durable.waits.store_area import WAITS

__all__ = ["Clock", "EagerWorkflows", "durable_eager", "eager_workflows", "sweep"]


def sweep(*durables: Durable) -> int:
    """Run one sweep of each Durable now, what every worker's sweeper does each poll
    interval: publish the runs that are due, wake those signalled, hand off limiter
    slots, fire schedules...; returns the runs published. (``durable sweep`` on the
    command line.)"""
    return sum(durable.runtime.sweeper.sweep_once() for durable in durables)


class Clock:
    """The durable timers' clock in a test: ``advance(seconds)`` moves every timer of its
    Durables' namespaces that far (sleeps, signal timeouts, workflow deadlines), then
    sweeps, so the runs now due go on, in-process. The database's clock is not touched."""

    def __init__(self, durables: Sequence[Durable]) -> None:
        self._durables = list(durables)

    def advance(self, seconds: float) -> int:
        """Returns the runs woken."""
        if seconds < 0:
            raise ValueError(f"advance(seconds): a clock only goes forward, got {seconds!r}")
        woken = 0
        for durable in self._durables:
            WAITS.of(durable.runtime.store).bring_timers_forward(seconds)
            woken += sweep(durable)
        return woken


class EagerWorkflows:
    """What ``eager_workflows`` yields: the Durable instances and their clock."""

    def __init__(self, durables: Sequence[Durable]) -> None:
        self.durables = list(durables)
        self.clock = Clock(self.durables)

    @property
    def durable(self) -> Durable:
        """The first Durable (the only one, most of the time)."""
        return self.durables[0]

    def sweep(self) -> int:
        """One sweep of its Durables now (see ``sweep``); returns the runs published."""
        return sweep(*self.durables)


@contextmanager
def eager_workflows(*durables: Durable) -> Iterator[EagerWorkflows]:
    """Run the workflows of ``durables`` (default: every Durable of Celery's current app)
    in-process until the block ends; their apps' ``task_always_eager`` is restored then."""
    chosen = list(durables) or durables_of(current_app._get_current_object())  # type: ignore[attr-defined]
    if not chosen:
        raise ValueError(
            "eager_workflows(): Celery's current app has no Durable; pass yours, "
            "eager_workflows(durable)"
        )
    apps = {id(d.app): d.app for d in chosen}.values()
    saved = [(app, app.conf.task_always_eager) for app in apps]
    for app in apps:
        app.conf.task_always_eager = True
    try:
        yield EagerWorkflows(chosen)
    finally:
        for app, eager in saved:
            app.conf.task_always_eager = eager


try:
    import pytest
except ImportError:  # pragma: no cover - only a test process imports this module
    pass
else:

    @pytest.fixture
    def durable_eager() -> Iterator[EagerWorkflows]:
        """The workflows of Celery's current app run eagerly, with a clock the test moves."""
        with eager_workflows() as kit:
            yield kit
