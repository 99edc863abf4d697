"""The stream writer's hand-over, alone: values added while a batch is being stored go in
the next batch, and the buffer is never taken twice for one batch (an empty second take
failed the step at its next write)."""

from __future__ import annotations

import threading

import pytest

from celery_durable.streams import batching
from celery_durable.streams.batching import StreamBuffer
from celery_durable.streams.store_area import StreamsArea


def test_values_added_while_a_batch_is_stored_go_in_the_next_one(
    store, monkeypatch: pytest.MonkeyPatch
) -> None:
    storing = threading.Event()
    go_on = threading.Event()
    batches: list[list[tuple[int, str]]] = []

    def stored(self, run_id, key, position, by_step, batch):  # noqa: ANN001, ANN202
        batches.append(list(batch))
        if len(batches) == 1:
            storing.set()
            assert go_on.wait(10)
        return len(batch)

    monkeypatch.setattr(StreamsArea, "write_values", stored)
    buffer = StreamBuffer(store, "r1", "tokens", position=0)
    buffer.add(0, "0")
    assert storing.wait(10)
    buffer.add(1, "1")  # while the first batch is being stored
    buffer.add(2, "2")
    go_on.set()
    buffer.drain()
    # The writer takes buffers in turn: once another's value is stored, it has taken
    # every buffer queued before it.
    later = StreamBuffer(store, "r2", "tokens", position=0)
    later.add(0, "0")
    later.drain()
    assert buffer.error is None
    assert batches[:2] == [[(0, "0")], [(1, "1"), (2, "2")]]
    assert [] not in batches
    buffer.add(3, "3")  # the buffer is still good for the step's next write
    buffer.drain()
    assert batches[-1] == [(3, "3")]


def test_a_store_error_is_raised_at_the_next_write_and_at_the_drain(
    store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self, run_id, key, position, by_step, batch):  # noqa: ANN001, ANN202
        raise ConnectionError("the database went away")

    monkeypatch.setattr(StreamsArea, "write_values", refused)
    buffer = StreamBuffer(store, "r1", "tokens", position=0)
    buffer.add(0, "0")
    with pytest.raises(ConnectionError):
        buffer.drain()
    with pytest.raises(ConnectionError):
        buffer.add(1, "1")
    assert batching.writer().thread.is_alive()  # the writer outlives a buffer's error
