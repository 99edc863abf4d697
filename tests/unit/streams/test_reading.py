"""Readers follow a stream from another thread as it is written, on both databases:
woken by the write (LISTEN on Postgres, a poll on SQLite), ending at the close or when
the run finished, resuming from an offset, timing out per value; and from asyncio."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable import InvalidArgument, WorkflowNotFound
from celery_durable.streams.reading import aread_stream, read_stream
from celery_durable.streams.store_area import STREAMS, Where
from tests.support.builders import new_run
from tests.support.event_loop import run_apart
from tests.support.waiting import wait_until


def writer(store: Any, run_id: str, count: int, gate: threading.Event) -> threading.Thread:
    """Writes ``count`` values, the second half once ``gate`` is set, then closes."""

    def write() -> None:
        area = STREAMS.of(store)
        for n in range(count):
            if n == count // 2:
                gate.wait(60)
            area.write_value(run_id, "t", str(n), Where(0, True, n))
        area.close_stream(run_id, "t")

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_reader_sees_values_as_they_are_written_and_ends_at_the_close(store):
    store.insert_run(new_run("live"))
    gate = threading.Event()
    seen: list[Any] = []
    reader = threading.Thread(
        target=lambda: seen.extend(read_stream(store, "live", "t", with_offsets=True))
    )
    reader.start()
    thread = writer(store, "live", 10, gate)
    wait_until(lambda: len(seen) == 5, 30, message="the first half, before the rest is written")
    gate.set()
    thread.join(60)
    reader.join(60)
    assert seen == [(n, n) for n in range(10)]
    # From an offset, once closed: the rest, and the iterator ends at once.
    assert list(read_stream(store, "live", "t", start=7)) == [7, 8, 9]
    assert list(read_stream(store, "live", "t", start=10)) == []


def test_a_finished_run_s_stream_ends_even_if_never_closed(store):
    store.insert_run(new_run("ended"))
    STREAMS.of(store).write_value("ended", "t", '"x"', Where(0, False, 0))
    store.cancel_run("ended", None)
    assert list(read_stream(store, "ended", "t")) == ["x"]
    assert list(read_stream(store, "ended", "never-written")) == []


def test_a_reader_times_out_per_value_and_resumes_where_it_stopped(store):
    store.insert_run(new_run("slow"))
    area = STREAMS.of(store)
    area.write_value("slow", "t", "0", Where(0, False, 0))
    got: list[Any] = []
    with pytest.raises(CeleryTimeoutError, match="read again from start=1"):
        for pair in read_stream(store, "slow", "t", timeout=0.3, with_offsets=True):
            got.append(pair)
    assert got == [(0, 0)]
    area.write_value("slow", "t", "1", Where(0, False, 1))
    area.close_stream("slow", "t")
    assert list(read_stream(store, "slow", "t", start=got[-1][0] + 1)) == [1]


def test_bad_arguments_and_a_missing_run_are_named(store):
    with pytest.raises(InvalidArgument, match="read_stream\\(start\\)"):
        read_stream(store, "x", "t", start=-1)
    with pytest.raises(InvalidArgument, match="read_stream\\(key\\)"):
        read_stream(store, "x", "", start=0)
    with pytest.raises(WorkflowNotFound):
        list(read_stream(store, "nobody", "t"))


def test_an_asyncio_reader_follows_the_stream_too(store):
    store.insert_run(new_run("aio"))
    gate = threading.Event()

    async def read() -> list[Any]:
        seen = []
        async for pair in aread_stream(store, "aio", "t", with_offsets=True):
            seen.append(pair)
            if len(seen) == 5:
                gate.set()  # the second half is written only once the first was read
        return seen

    thread = writer(store, "aio", 10, gate)
    assert run_apart(read()) == [(n, n) for n in range(10)]
    thread.join(60)

    async def timed_out() -> None:
        store.insert_run(new_run("aio-idle"))
        async for _ in aread_stream(store, "aio-idle", "t", timeout=0.2):
            pass

    with pytest.raises(CeleryTimeoutError):
        run_apart(timed_out())
