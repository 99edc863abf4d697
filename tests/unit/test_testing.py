"""``celery_durable.testing``: eager workflows and a test clock, through the public API only
(a user's app on SQLite, its workflows sleeping, waiting for signals, and past deadlines)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

import celery_durable as cd
from celery_durable import Durable, WorkflowStatus
from celery_durable.testing import durable_eager, eager_workflows  # noqa: F401 - the fixture


class Shop:
    def __init__(self, tmp_path: Path) -> None:
        # Made last, so Celery's current app: the one the fixture finds.
        self.app = Celery("testing-shop", broker="memory://")
        self.durable = Durable(self.app, database_url=f"sqlite:///{tmp_path}/shop.sqlite3")
        self.durable.migrate()

        @self.durable.workflow
        def ships_tomorrow(order: int) -> str:
            cd.sleep(3600)
            return f"shipped {order}"

        @self.durable.workflow
        def approval(order: int) -> str:
            decision = cd.wait_for_signal("approved", timeout=600, default={"by": "nobody"})
            return f"{order} approved by {decision['by']}"

        @self.durable.workflow(timeout="1h")
        def forgotten(order: int) -> str:
            cd.wait_for_signal("never")
            return "unreachable"

        self.ships_tomorrow = ships_tomorrow
        self.approval = approval
        self.forgotten = forgotten


@pytest.fixture(autouse=True)
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    made = Shop(tmp_path)
    yield made
    made.durable.runtime.store.dispose()


def test_the_fixture_runs_eagerly_and_its_clock_fires_a_sleep(shop: Shop, durable_eager):  # noqa: F811
    assert durable_eager.durable is shop.durable
    handle = shop.ships_tomorrow.delay(7)
    assert handle.status() is WorkflowStatus.WAITING
    assert durable_eager.clock.advance(3540) == 0  # a minute short of due
    assert handle.status() is WorkflowStatus.WAITING
    assert durable_eager.clock.advance(60) == 1
    assert handle.get(timeout=10) == "shipped 7"


def test_the_clock_fires_a_signals_timeout_and_a_signal_comes_first_elsewhere(
    shop: Shop,
    durable_eager,  # noqa: F811
):
    timed_out = shop.approval.delay(1)
    signalled = shop.approval.delay(2)
    signalled.signal("approved", {"by": "ann"})
    assert signalled.get(timeout=10) == "2 approved by ann"
    durable_eager.clock.advance(600)
    assert timed_out.get(timeout=10) == "1 approved by nobody"


def test_the_context_manager_fires_a_workflow_deadline_and_restores_eager_mode(shop: Shop):
    assert shop.app.conf.task_always_eager is False
    with eager_workflows(shop.durable) as kit:
        assert shop.app.conf.task_always_eager is True
        handle = shop.forgotten.delay(3)
        assert handle.status() is WorkflowStatus.WAITING
        kit.clock.advance(3600)
        with pytest.raises(cd.WorkflowCancelled, match="deadline exceeded"):
            handle.get(timeout=10)
    assert shop.app.conf.task_always_eager is False


def test_the_clock_only_goes_forward_and_an_app_without_durable_is_named(shop: Shop):
    with eager_workflows(shop.durable) as kit, pytest.raises(ValueError, match="only goes"):
        kit.clock.advance(-1)
    Celery("no-durable", broker="memory://")  # now Celery's current app
    with pytest.raises(ValueError, match="pass yours"), eager_workflows():
        pass
