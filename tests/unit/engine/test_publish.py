"""Publish, or leave it to the sweeper (engine/publish.py): a failed publish of a stored row
is logged with its caller's text and fields and loses nothing; a caller that must be told
raises instead."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from celery_durable import Durable, RunNotPublished, WorkflowStatus
from celery_durable.core.logs import run_fields
from celery_durable.engine.publish import batch_ranges, publish_or_leave
from tests.support.waiting import wait_until

log = logging.getLogger("celery_durable.tests.publish")


def refused() -> None:
    raise ConnectionRefusedError("the broker is down")


def test_a_failed_publish_is_logged_with_the_callers_text_and_fields(caplog):
    caplog.set_level(logging.DEBUG, logger=log.name)
    fields = run_fields("r-1", "wf.a")
    left = publish_or_leave(
        refused, log, "workflow %s run %s", "wf.a", "r-1", fields=fields, level=logging.WARNING
    )
    assert left is False
    [record] = caplog.records
    assert record.getMessage() == (
        "publishing workflow wf.a run r-1 failed; the sweeper will dispatch it"
    )
    assert record.levelno == logging.WARNING and record.name == log.name
    assert record.exc_info is not None and record.exc_info[0] is ConnectionRefusedError
    assert record.run_id == "r-1" and record.workflow == "wf.a"  # type: ignore[attr-defined]


def test_a_publish_that_works_logs_nothing_and_says_so(caplog):
    caplog.set_level(logging.DEBUG, logger=log.name)
    sent: list[str] = []
    assert publish_or_leave(lambda: sent.append("m"), log, "x %s", "y", fields={}) is True
    assert sent == ["m"] and not caplog.records


def test_a_caller_that_must_be_told_raises_instead_of_the_log(caplog):
    caplog.set_level(logging.DEBUG, logger=log.name)

    def failed(exc: Exception) -> None:
        raise RuntimeError("told") from exc

    with pytest.raises(RuntimeError, match="told") as raised:
        publish_or_leave(refused, log, "x %s", "y", fields={}, failed=failed)
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
    assert not caplog.records


@pytest.fixture
def unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Durable]:
    """A Durable whose broker refuses connections (nothing listens on port 1) and whose
    store, SQLite, works: every publish fails for real."""
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("unreachable", broker="redis://127.0.0.1:1/0")
    app.conf.task_publish_retry = False
    # One connection attempt per publish, not kombu's retries with backoff.
    app.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0}
    instance = Durable(app, database_url=f"sqlite:///{tmp_path}/store.sqlite3")
    instance.migrate()
    yield instance
    instance.runtime.store.dispose()


def test_a_sweep_whose_publish_fails_leaves_the_run_due(unreachable, caplog):
    @unreachable.workflow(name="p.flow")
    def flow(n: int) -> int:
        return n

    caplog.set_level(logging.INFO, logger="celery_durable")
    # A countdown stores the run without a message: the sweep publishes it when due.
    handle = flow.apply_async(args=(1,), run_id="p-1", countdown=0.05)
    wait_until(lambda: unreachable.runtime.store.now() > handle.record().due_at, 10, message="due")
    assert unreachable.runtime.sweeper.sweep_once() == 0
    failed = [r for r in caplog.records if r.getMessage().startswith("publishing workflow")]
    assert [r.getMessage() for r in failed] == [
        "publishing workflow p.flow run p-1 failed; a later sweep retries"
    ]
    assert failed[0].levelno == logging.ERROR and failed[0].exc_info is not None
    assert handle.status() is WorkflowStatus.PENDING  # still due: the next sweep retries


def test_a_start_whose_publish_fails_raises_for_the_caller(unreachable):
    @unreachable.workflow(name="p.start")
    def start(n: int) -> int:
        return n

    with pytest.raises(RunNotPublished) as raised:
        start.delay(1)
    assert raised.value.__cause__ is not None  # the broker's own error, chained
    assert raised.value.handle.status() is WorkflowStatus.PENDING  # stored: swept later


def test_batch_ranges_keep_consecutive_items_of_one_of_the_maps_batches_together():
    assert batch_ranges(range(7), 3) == [(0, 3), (3, 3), (6, 1)]  # the first dispatch
    # Published again: a gap (an item recorded or running meanwhile) or a batch's end
    # splits a message; order and repeats don't matter.
    assert batch_ranges([9, 5, 4, 1, 0, 3, 6, 4], 3) == [(0, 2), (3, 3), (6, 1), (9, 1)]
    assert batch_ranges([2, 3], 1) == [(2, 1), (3, 1)]
    assert batch_ranges([], 50) == []


def test_publishing_to_a_queue_the_app_does_not_know_leaves_its_queues_unchanged(tmp_path):
    """Bug: the sweeper's publish to a queue by name added it to ``app.amqp.queues`` from its
    thread while the consumer, starting, iterated that dict: "dictionary changed size during
    iteration" ended the worker. The message still goes to that queue."""
    app = Celery("queues", broker="memory://")
    durable = Durable(app, database_url=f"sqlite:///{tmp_path}/store.sqlite3")

    @durable.workflow
    def wf() -> None: ...

    before = set(app.amqp.queues)
    durable.runtime.publish("run-1", wf.name, "[[], {}]", "not-declared-yet")
    durable.runtime.dispatch.publish_items("some.step", "items-queue", "run-1", 0, [0, 1])
    assert set(app.amqp.queues) == before
    with app.connection_for_read() as conn:
        for name, count in (("not-declared-yet", 1), ("items-queue", 2)):
            assert conn.default_channel.queue_declare(name, passive=True).message_count == count
