"""``cd.map(..., batch_size=K)`` on the embedded default: SQLite store, Celery in eager
mode. A batch's items run in order in one task; results, failures, retries and replay
mean what they mean with one task per item."""

from __future__ import annotations

import pytest

import celery_durable as cd
from celery_durable import InvalidArgument, WorkflowFailed, WorkflowStatus
from celery_durable.fanout.compose import AUTO_MAX, auto_size
from tests.support.flaky_map import flaky_map
from tests.support.waiting import wait_until


def _published(durable, monkeypatch) -> list[tuple]:
    """The argument tuples of every item message the map publishes."""
    sent: list[tuple] = []
    dispatch = durable.runtime.dispatch
    original = dispatch._publish_one

    def publish_one(task, name, args, options):
        sent.append(args)
        original(task, name, args, options)

    monkeypatch.setattr(dispatch, "_publish_one", publish_one)
    return sent


def test_a_batched_map_sends_one_task_per_batch_and_returns_input_order(durable, monkeypatch):
    calls: list[int] = []

    @durable.step
    def square(n: int) -> int:
        calls.append(n)
        return n * n

    @durable.workflow
    def squares(count: int, size: int) -> list[int]:
        values = cd.map(square, range(count), batch_size=size)
        cd.sleep(0.01)  # resumed by the sweeper: the body replays the map from its records
        return values

    sent = _published(durable, monkeypatch)
    handle = squares.delay(7, 3)
    wait_until(lambda: durable.runtime.sweeper.sweep_once() >= 0 and handle.status().finished, 10)
    assert handle.get(timeout=5) == [n * n for n in range(7)]
    assert calls == list(range(7))  # in order, each once: the replay ran none again
    assert [args[3:] for args in sent] == [(0, 3), (3, 3), (6, 1)]  # published once
    items = durable.runtime.store.fanout.list_items(handle.id)
    assert [(i.item, i.status) for i in items] == [(n, "ok") for n in range(7)]


def test_a_batch_whose_publish_was_lost_is_published_again_as_the_same_batch(durable, monkeypatch):
    @durable.step
    def double(n: int) -> int:
        return 2 * n

    @durable.workflow
    def doubles(count: int) -> list[int]:
        return cd.map(double, range(count), batch_size=3)

    monkeypatch.setattr(durable.config, "dispatch_grace", 0.0)  # due again at once
    monkeypatch.setattr(durable.config, "sweep_batch", 2)  # a batch over two sweep pages
    sent = _published(durable, monkeypatch)
    dispatch = durable.runtime.dispatch
    publish_one = dispatch._publish_one
    broker_down = [True]

    def lost_while_down(task, name, args, options):
        if broker_down[0]:
            raise ConnectionRefusedError("the broker is down")
        publish_one(task, name, args, options)

    monkeypatch.setattr(dispatch, "_publish_one", lost_while_down)
    handle = doubles.delay(7)
    assert handle.status() is WorkflowStatus.WAITING and sent == []  # nothing went out
    broker_down[0] = False
    wait_until(lambda: durable.runtime.sweeper.sweep_once() >= 0 and handle.status().finished, 10)
    assert handle.get(timeout=5) == [2 * n for n in range(7)]
    assert [args[3:] for args in sent] == [(0, 3), (3, 3), (6, 1)]  # as first meant


def test_batch_size_one_is_one_task_per_item(durable, monkeypatch):
    @durable.step
    def echo(n: int) -> int:
        return n

    @durable.workflow
    def echoes() -> list[int]:
        return cd.map(echo, range(3), batch_size=1)

    sent = _published(durable, monkeypatch)
    assert echoes.delay().get(timeout=5) == [0, 1, 2]
    assert [len(args) for args in sent] == [4, 4, 4]  # today's message, unchanged


@pytest.mark.parametrize("bad", [0, -1, 2.5, "big", True, None, 10_001])
def test_a_bad_batch_size_raises_invalid_argument_before_anything_is_written(durable, bad):
    @durable.step
    def echo(n: int) -> int:
        return n

    @durable.workflow(max_attempts=1)
    def echoes() -> list[int]:
        return cd.map(echo, range(3), batch_size=bad)

    handle = echoes.delay()
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=5)
    assert failed.value.error_type == "celery_durable.errors.InvalidArgument"
    assert "batch_size" in failed.value.error_message
    assert durable.runtime.store.fanout.list_items(handle.id) == []
    assert durable.runtime.store.load_steps(handle.id) == {}
    assert issubclass(InvalidArgument, ValueError)


def test_batched_item_failures_retries_and_return_exceptions(durable):
    flakies, tries = flaky_map(durable, 5, batch_size=5)
    handle = flakies.delay(True)
    assert handle.get(timeout=5) == [0, 1, "builtins.ValueError", 3, 4]
    assert tries == {0: 1, 1: 3, 2: 3, 3: 1, 4: 1}  # retried in-process, then recorded
    attempts = {i.item: i.attempts for i in durable.runtime.store.fanout.list_items(handle.id)}
    assert attempts == {0: 1, 1: 3, 2: 3, 3: 1, 4: 1}
    failing = flakies.delay(False)
    with pytest.raises(WorkflowFailed) as failed:
        failing.get(timeout=5)
    assert failed.value.error_type == "celery_durable.errors.StepFailed"
    assert "item 2" in failed.value.error_message


def test_auto_batch_size_follows_the_item_count_and_the_fleet(durable, monkeypatch):
    assert auto_size(10, 2) == 2  # 8 batches for 2 processes
    assert auto_size(10_000, 2) == AUTO_MAX  # bounded
    assert auto_size(10_000, 100) == 25
    assert auto_size(3, 64) == 1

    @durable.step
    def echo(n: int) -> int:
        return n

    @durable.workflow
    def echoes(count: int) -> list[int]:
        return cd.map(echo, range(count), batch_size="auto")

    sent = _published(durable, monkeypatch)
    monkeypatch.setattr(durable.runtime.fleet, "concurrency", lambda ttl: 2)
    assert echoes.delay(100).get(timeout=5) == list(range(100))
    assert len(sent) == 8 and sum(args[4] for args in sent) == 100
