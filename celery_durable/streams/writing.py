"""Writing streams: ``write_stream`` and ``close_stream``, in a workflow body or in a
step (sync or async), and the settle listener that closes a finished run's streams.

A step's value is handed to the process's stream writer and stored a moment later, in a
batch with the others it wrote meanwhile (``batching``): the step does not wait for the
database at each write, and a token, a progress figure, is read as it is made. Every
value a step's try wrote is stored before the try's outcome is recorded. A value the
body writes between steps is stored before ``write_stream`` returns.

A retried or replayed write is stored once: each write is known by where the run made it
(the step's index, or the body's place between steps, and its order there, per stream),
so a step's retry, or a delivery that replays the body after a worker died, finds its
writes stored already and adds nothing. A retry that writes other values keeps the first
try's at the places both wrote; the values it writes past them are appended.

Example::

    @durable.step
    def generate(prompt: str) -> str:
        text = ""
        for token in llm(prompt):
            cd.write_stream("tokens", token)     # readers see it in a moment
            text += token
        return text
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery_durable.body.context import RUNNING_STEP, StepCall, WorkflowContext
from celery_durable.body.event_loop import IN_ASYNC_STEP
from celery_durable.body.replay import store_guard
from celery_durable.core import serialization, validate
from celery_durable.engine.runtime_view import RuntimeView, SettleListener
from celery_durable.errors import StreamClosed
from celery_durable.streams.batching import StreamBuffer
from celery_durable.streams.store_area import STREAMS, Where

T = TypeVar("T")

WING = "streams"
# In a step's try: its buffers, by key, and the keys it closed.
BUFFERS = "streams.buffers"
CLOSED = "streams.closed"
# Set in the run's context once this delivery wrote to (or closed) a stream.
USED = "streams.used"

logger = logging.getLogger("celery_durable.workflow")


def write_stream(key: str, value: Any) -> None:
    """Append ``value`` (JSON) to this run's stream ``key``.

    Works in a workflow body and in a step it runs. Readers
    (``handle.read_stream(key)``) see it in a moment: a step's values are stored in
    batches while it runs, and all before its result is recorded; the body's, before this
    returns. A write that a retry or a replay makes again at the same place is stored
    once. Raises ``StreamClosed`` once the stream is closed (in a step, for a close made
    elsewhere, at a later write or when the step returns: the step fails), and
    ``PayloadTooLarge`` (naming the key) for a value over ``durable_max_payload_bytes``.
    A plain call in an async body or step: nothing to await, and no wait for the
    database in a step."""
    ctx, where, step = _place(f"celery_durable.write_stream({key!r})", key)
    encoded = serialization.encode_json(
        f"write_stream({key!r}) in workflow run {ctx.run_id!r}: the value",
        value,
        ctx.max_payload_bytes,
        ctx.max_payload_depth,
    )
    if step is not None:
        if key in step.wings.get(CLOSED, ()):
            raise StreamClosed(ctx.run_id, key)
        _buffer(ctx, step, key).add(where.seq, encoded)
        return
    area = STREAMS.of(ctx.store)
    _written(ctx, where, lambda: area.write_value(ctx.run_id, key, encoded, where))


def close_stream(key: str) -> None:
    """End this run's stream ``key``: its readers stop after its last value. Closing it
    again does nothing; a run that finishes closes the streams it left open."""
    ctx, where, step = _place(f"celery_durable.close_stream({key!r})", key, count=False)
    if step is not None:
        buffer = step.wings.get(BUFFERS, {}).get(key)
        if buffer is not None:
            buffer.drain()  # the step's values come before the close
        step.wings.setdefault(CLOSED, set()).add(key)
    area = STREAMS.of(ctx.store)
    _written(ctx, where, lambda: area.close_stream(ctx.run_id, key))


def _buffer(ctx: WorkflowContext, step: StepCall, key: str) -> StreamBuffer:
    """The step try's buffer for ``key``; its first one has the try store them all
    before its outcome is recorded."""
    buffers: dict[str, StreamBuffer] = step.wings.setdefault(BUFFERS, {})
    buffer = buffers.get(key)
    if buffer is None:
        if not buffers:
            step.before_record.append(lambda failed: _drain(ctx.run_id, buffers, failed))
        buffer = buffers[key] = StreamBuffer(ctx.store, ctx.run_id, key, step.index)
    return buffer


def _drain(run_id: str, buffers: dict[str, StreamBuffer], failed: bool) -> None:
    """Wait until the try's values are stored. A try that returned fails with the
    writer's error; one that failed keeps its own (and its retry writes them again)."""
    for buffer in list(buffers.values()):
        try:
            buffer.drain()
        except Exception:
            if not failed:
                raise
            logger.warning(
                "a failed step of run %s could not store its values of stream %r",
                run_id,
                buffer.key,
                exc_info=True,
            )


def _written(ctx: WorkflowContext, where: Where, write: Callable[[], T]) -> T:
    """``write()``'s result. In a step, a database error is the step's (its retry writes
    again, at the same places); in the body, it stops the body (``store_guard``), the run
    left to its lease. StreamClosed is the caller's either way."""
    if where.by_step:
        return write()
    refused: StreamClosed | None = None
    with store_guard(ctx):
        try:
            return write()
        except StreamClosed as exc:
            refused = exc
    assert refused is not None  # store_guard raises what it doesn't return
    raise refused


def _place(
    what: str, key: str, *, count: bool = True
) -> tuple[WorkflowContext, Where, StepCall | None]:
    """The running workflow's context, where in it this write is made (taking the next
    place there with ``count``) and the step's try it is made in (None: the body)."""
    ctx = WorkflowContext.current()
    if ctx is None:
        raise RuntimeError(f"{what} can only be called inside a workflow or a step it runs")
    step = RUNNING_STEP.get()
    if step is not None:
        counters: dict[str, int] = step.wings.setdefault(WING, {})
        position, by_step = step.index, True
    elif ctx.in_step or IN_ASYNC_STEP.get():
        raise RuntimeError(f"{what} can't be called here: call it from a step or the body")
    else:
        ctx.check_stopping()
        # The body's counters, per place between steps: a replay counts them again.
        places: dict[int, dict[str, int]] = ctx.wing_state(WING, dict)
        counters = places.setdefault(ctx.next_index, {})
        position, by_step = ctx.next_index, False
    if key not in counters:  # a key written here before was checked then
        argument = what.removeprefix("celery_durable.").partition("(")[0] + "(key)"
        validate.check_text(key, argument, max_chars=255, allow_empty=False)
    ctx.wings[USED] = True
    seq = counters.get(key, 0)
    if count:
        counters[key] = seq + 1
    return ctx, Where(position, by_step, seq), step


class CloseStreams(SettleListener):
    """A run that finished closes the streams it left open (a cancel closes them in its
    own transaction). Only after a delivery that wrote to one: a run without streams
    pays nothing, and readers and ``durable show`` take a finished run's streams as
    closed anyway."""

    def settled(
        self,
        runtime: RuntimeView,
        ctx: WorkflowContext,
        status: str,
        result: str | None,
        error: str | None,
    ) -> None:
        if not ctx.wings.get(USED):
            return
        try:
            STREAMS.of(runtime.store).close_run_streams(ctx.run_id)
        except Exception:  # noqa: BLE001 - the run is settled: its readers end all the same
            logger.warning("could not close the streams of run %s", ctx.run_id, exc_info=True)
