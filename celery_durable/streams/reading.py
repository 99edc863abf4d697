"""Reading streams from any process: ``handle.read_stream`` and ``handle.aread_stream``
follow a run's stream from an offset, yielding each value as it is written, until the
stream is closed (or its run finished).

A waiting reader is woken by the write itself: its NOTIFY on Postgres (LISTEN: the
thread's listener, or the event loop's one connection), a poll on SQLite. A reader that
starts again from the offset after the last one it saw loses nothing and sees nothing
twice: offsets are dense and a value's offset never changes.

Example::

    for offset, token in handle.read_stream("tokens", start=0, with_offsets=True):
        print(offset, token)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable.core import serialization, validate
from celery_durable.core.off_loop import off_loop
from celery_durable.errors import InvalidArgument, WorkflowNotFound
from celery_durable.store import Store
from celery_durable.streams.store_area import PAGE, STREAMS, StreamPage

# The longest wait between two reads while nothing arrives: a notification wakes the
# reader first; this bounds what a lost one costs (another waiter on the thread took it).
SAFETY_READ = 0.5
# The same for an asyncio reader, whose loop's LISTEN connection is its own.
ASYNC_SAFETY_READ = 5.0


class StreamReading:
    """One reader's place in a stream: the next offset, and how long it may wait."""

    def __init__(
        self, store: Store, run_id: str, key: str, start: int, timeout: float | None
    ) -> None:
        validate.check_text(key, "read_stream(key)", max_chars=255, allow_empty=False)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidArgument(
                f"read_stream(start): an offset (an int, 0 or more), not {start!r}"
            )
        self.area = STREAMS.of(store)
        self.run_id = run_id
        self.key = key
        self.offset = start
        self.timeout = (
            None if timeout is None else validate.parse_duration(timeout, "read_stream(timeout)")
        )
        self.deadline = self._next_deadline()

    def _next_deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def read(self) -> StreamPage:
        page = self.area.read(self.run_id, self.key, self.offset)
        if page.status is None:
            raise WorkflowNotFound(self.run_id)
        if page.values:
            self.deadline = self._next_deadline()  # the timeout is per value
        return page

    def values(self, page: StreamPage, with_offsets: bool) -> Iterator[Any]:
        for offset, value in page.values:
            self.offset = offset + 1
            decoded = serialization.loads(value)
            yield (offset, decoded) if with_offsets else decoded

    def ended(self, page: StreamPage) -> bool:
        return page.done and self.offset >= page.length

    def more_now(self, page: StreamPage) -> bool:
        """A full page was read: the next may be there already."""
        return len(page.values) == PAGE

    def pause(self, longest: float) -> float:
        """How long to wait for the next change; Celery's TimeoutError once the timeout
        passed without a value."""
        if self.deadline is None:
            return longest
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CeleryTimeoutError(
                f"stream {self.key!r} of workflow run {self.run_id!r}: no value after offset "
                f"{self.offset - 1} within {self.timeout}s; read again from start="
                f"{self.offset} to go on"
            )
        return min(longest, remaining)


def read_stream(
    store: Store,
    run_id: str,
    key: str,
    start: int = 0,
    timeout: float | None = None,
    with_offsets: bool = False,
) -> Iterator[Any]:
    """The values of the run's stream ``key`` from offset ``start``, as they are written,
    until it is closed or the run finished; ``(offset, value)`` pairs with
    ``with_offsets``. ``timeout``: seconds to wait for each next value, then Celery's
    TimeoutError (the run goes on; read again from the next offset)."""
    reading = StreamReading(store, run_id, key, start, timeout)
    return _read(store, reading, with_offsets)


def _read(store: Store, reading: StreamReading, with_offsets: bool) -> Iterator[Any]:
    # The listener first: a write between a read and the wait still wakes the wait.
    with store.listener() as listener:
        while True:
            page = reading.read()
            yield from reading.values(page, with_offsets)
            if reading.ended(page):
                return
            if not reading.more_now(page):
                listener.wait_for(reading.run_id, reading.pause(SAFETY_READ))


def aread_stream(
    store: Store,
    run_id: str,
    key: str,
    start: int = 0,
    timeout: float | None = None,
    with_offsets: bool = False,
) -> AsyncIterator[Any]:
    """``read_stream`` for asyncio: each read runs on a client thread, and between reads
    it waits on a notification for the run on the event loop, not on a thread."""
    reading = StreamReading(store, run_id, key, start, timeout)
    return _aread(store, reading, with_offsets)


async def _aread(store: Store, reading: StreamReading, with_offsets: bool) -> AsyncIterator[Any]:
    async with store.watching(reading.run_id) as changes:
        while True:
            page = await off_loop(reading.read)
            for value in reading.values(page, with_offsets):
                yield value
            if reading.ended(page):
                return
            if not reading.more_now(page):
                await changes.wait(reading.pause(ASYNC_SAFETY_READ))
