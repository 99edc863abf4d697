"""A step's stream writes, stored in batches by a writer thread: the step hands each
value over and goes on; the thread stores what piled up while it wrote the last batch,
one transaction a batch. A value written alone is stored at once (a batch of one); many
written fast are stored many to a transaction. The step's try waits for all its values
before its outcome is recorded, so a recorded step's values are all stored.

Example::

    buffer = StreamBuffer(store, "r1", "tokens", position=3)
    buffer.add(0, '"Hel"')          # returns at once; the writer thread stores it
    buffer.drain()                 # every value stored, or the writer's error raised
"""

from __future__ import annotations

import logging
import os
import queue
import threading

from celery_durable.store.store import Store
from celery_durable.streams.store_area import STREAMS

logger = logging.getLogger("celery_durable.workflow")

# The most values one transaction stores (a far larger backlog takes several).
BATCH = 5000
# The most values a step's try may have handed over and not stored: a step that writes
# faster than the database takes them waits at its next write, and holds no more.
UNSTORED_MAX = 4 * BATCH


class StreamBuffer:
    """One step try's values for one stream, from handing over to stored."""

    def __init__(self, store: Store, run_id: str, key: str, position: int) -> None:
        self.store = store
        self.run_id = run_id
        self.key = key
        self.position = position
        self.pending: list[tuple[int, str]] = []  # (seq, JSON), not taken by the writer yet
        self.unstored = 0  # handed over and not stored yet (pending, or being written)
        self.queued = False  # with the writer, to be taken
        self.error: BaseException | None = None
        self.changed = threading.Condition()

    def add(self, seq: int, value: str) -> None:
        """Hand ``value`` over to be stored (waiting first while ``UNSTORED_MAX`` are);
        the writer's error for an earlier value of this stream (StreamClosed, a database
        error) is raised here."""
        with self.changed:
            while self.unstored >= UNSTORED_MAX and self.error is None:
                self.changed.wait()
            if self.error is not None:
                raise self.error
            self.pending.append((seq, value))
            self.unstored += 1
            if self.queued:
                return
            self.queued = True
        writer().put(self)

    def drain(self) -> None:
        """Wait until every value handed over is stored; the writer's error if one was
        not (the step's failure: its retry writes them again, at the same places)."""
        with self.changed:
            while self.unstored and self.error is None:
                self.changed.wait()
            if self.error is not None:
                raise self.error

    def store_pending(self) -> None:
        """The writer's part: store what is pending, a batch at a time."""
        with self.changed:
            batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
            # Left queued only for the rest of a backlog: a value added from now on
            # queues the buffer again itself.
            more = self.queued = bool(self.pending)
            if self.error is not None or not batch:
                return
        area = STREAMS.of(self.store)
        try:
            area.write_values(self.run_id, self.key, self.position, True, batch)
        except BaseException as exc:  # noqa: BLE001 - the step's, raised in its thread
            with self.changed:
                self.error = exc
                self.changed.notify_all()
            return
        with self.changed:
            self.unstored -= len(batch)
            self.changed.notify_all()
        if more:
            writer().put(self)


class _Writer:
    """The process's writer thread: stores the buffers handed to it, in turn."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.buffers: queue.SimpleQueue[StreamBuffer] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._run, name="celery-durable-stream-writer", daemon=True
        )
        self.thread.start()

    def put(self, buffer: StreamBuffer) -> None:
        self.buffers.put(buffer)

    def _run(self) -> None:
        while True:
            buffer = self.buffers.get()
            try:
                buffer.store_pending()
            except Exception:  # noqa: BLE001 - the thread must outlive any one buffer
                logger.exception("the stream writer failed on run %s", buffer.run_id)


_writer: _Writer | None = None
_starting = threading.Lock()


def writer() -> _Writer:
    """This process's writer, started at first use (again in a forked child: a thread
    does not survive a fork)."""
    global _writer
    found = _writer
    if found is not None and found.pid == os.getpid():
        return found
    with _starting:
        if _writer is None or _writer.pid != os.getpid():
            _writer = _Writer()
        return _writer
