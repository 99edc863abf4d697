"""Suspension: ``sleep``, ``sleep_until`` and ``wait_for_signal``. A workflow that waits holds
no worker, no lease and no broker message.

A wait is recorded as a step. The first time the body reaches it, the step is stored as
"waiting" (with its deadline), the run becomes WAITING and the Celery task returns. A
signal or the sweeper (when the deadline passes) makes the run PENDING again; the body
replays up to the wait, which now completes and is stored as "ok".

Example::

    @durable.workflow
    def reminder(user_id: int) -> None:
        cd.sleep(24 * 3600)         # a durable timer; no worker is held for a day
        if cd.wait_for_signal("snooze", timeout=3600, default="expired") == "expired":
            send_reminder(user_id)
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from celery_durable.body.context import WorkflowContext, enter_body
from celery_durable.body.event_loop import awaited_wait, in_async_body, returned
from celery_durable.body.replay import (
    check_replay,
    record,
    stop_writing,
    store_guard,
    write_caught_failure,
)
from celery_durable.core import faults, serialization, validate
from celery_durable.core.logs import describe_wait
from celery_durable.errors import Suspended
from celery_durable.store import Outcome, StepRecord
from celery_durable.store.engine_names import SIGNAL_STEP_PREFIX
from celery_durable.waits.store_area import WAITS

logger = logging.getLogger("celery_durable.suspend")

SLEEP_STEP = "celery_durable.sleep"


def wait_step(
    ctx: WorkflowContext,
    step_name: str,
    step_input: str,
    *,
    timeout: float | None = None,
    wake_at: float | None = None,
    signal: str | None = None,
    default: Any = None,
) -> Any:
    """The one suspension routine behind sleep, sleep_until and wait_for_signal.

    Returns the signal's payload, or ``default`` once the deadline has passed. In an async
    body it returns an awaitable of that: the index is taken now, in call order, and the
    wait (which may suspend the run) happens when it is awaited.
    """
    ctx.check_stopping()
    write_caught_failure(ctx)
    index = ctx.take_index()
    if not in_async_body():
        return _wait_at(ctx, index, step_name, step_input, timeout, wake_at, signal, default)
    label = f"{describe_call(step_name)} (index {index})"
    recorded = ctx.history.get(index)
    if recorded is not None and recorded.status == "ok":
        check_replay(ctx, index, recorded, step_name, step_input)
        return returned(label, wait_outcome(recorded.output, default))
    return awaited_wait(
        label,
        lambda: _wait_at(ctx, index, step_name, step_input, timeout, wake_at, signal, default),
    )


def describe_call(step_name: str) -> str:
    """How the body called the wait recorded as ``step_name``."""
    if step_name.startswith(SIGNAL_STEP_PREFIX):
        return f"cd.wait_for_signal({step_name[len(SIGNAL_STEP_PREFIX) :]!r})"
    return "cd.sleep()"


def _wait_at(
    ctx: WorkflowContext,
    index: int,
    step_name: str,
    step_input: str,
    timeout: float | None,
    wake_at: float | None,
    signal: str | None,
    default: Any,
) -> Any:
    ctx.check_stopping()
    store = ctx.store
    recorded = ctx.history.get(index)
    deadline = wake_at
    if recorded is not None:
        check_replay(ctx, index, recorded, step_name, step_input)
        if recorded.status == "ok":
            return wait_outcome(recorded.output, default)
        deadline = serialization.loads(recorded.output or "{}").get("deadline")
    elif timeout is not None:
        with store_guard(ctx):
            deadline = store.now() + max(0.0, timeout)
    step = StepRecord(index, step_name, "ok", step_input, None, None)
    while True:
        if signal is not None:
            with store_guard(ctx):
                taken = WAITS.of(store).consume_signal(
                    ctx.run_id, ctx.fence, signal, step, ctx.take_deferred()
                )
            if taken.outcome in (Outcome.LEASE_LOST, Outcome.CANCELLED):
                stop_writing(ctx)
            if taken.outcome is Outcome.RECORDED:
                logger.debug(
                    "workflow %s run %s: step %d consumed signal %r",
                    ctx.workflow_name,
                    ctx.run_id,
                    index,
                    signal,
                    extra=ctx.log_fields(index),
                )
                payload = taken.payload
                ctx.history[index] = StepRecord(index, step_name, "ok", step_input, payload, None)
                faults.reach(faults.AFTER_CONSUME_SIGNAL, **ctx.log_fields(index))
                return serialization.loads(payload or "null")
        with store_guard(ctx):
            due = deadline is not None and store.now() >= deadline
        if due:
            # A signal wait that timed out records no output (NULL), which no payload (JSON
            # text, "null" included) is: replay tells a timeout from a signal without one.
            # Duration 0 unless it waited (record_step measures that on conflict).
            output = None if signal is not None else "null"
            timed_out = StepRecord(index, step_name, "ok", step_input, output, None, 0.0)
            return wait_outcome(record(ctx, timed_out).output, default)
        waiting = StepRecord(
            index,
            step_name,
            "waiting",
            step_input,
            serialization.dumps({"deadline": deadline}),
            None,
        )
        with store_guard(ctx):
            outcome = WAITS.of(store).suspend_run(
                ctx.run_id, ctx.fence, waiting, signal, deadline, ctx.take_deferred()
            )
        if outcome is Outcome.SIGNALLED:
            continue  # a signal arrived between our look and the suspension: take it
        if outcome is not Outcome.SUSPENDED:
            stop_writing(ctx)
        faults.reach(faults.AFTER_SUSPEND, **ctx.log_fields(index))
        raise ctx.stop(Suspended(describe_wait(signal, deadline)))


def wait_outcome(output: str | None, default: Any) -> Any:
    """What a finished wait returns: the payload it recorded, or ``default`` for a timeout
    (no output). A timeout recorded by an earlier version stored "null": None."""
    return default if output is None else serialization.loads(output)


def sleep(seconds: float) -> Any:
    """Durably sleep: the run waits ``seconds`` without holding a worker.

    The timer lives in the database and fires within one ``durable_poll_interval``. In an
    async workflow, await it: ``await cd.sleep(60)``.
    """
    ctx = enter_body("celery_durable.sleep()")
    if seconds != seconds or seconds < 0:  # NaN or negative
        raise ValueError(f"sleep(seconds) needs a non-negative number, got {seconds!r}")
    return wait_step(ctx, SLEEP_STEP, "[]", timeout=float(seconds))


def sleep_until(when: dt.datetime) -> Any:
    """Durably sleep until ``when`` (a naive datetime is taken as UTC); awaited in an
    async workflow."""
    ctx = enter_body("celery_durable.sleep_until()")
    if not isinstance(when, dt.datetime):
        raise TypeError(f"sleep_until(when) needs a datetime, got {type(when).__name__}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return wait_step(ctx, SLEEP_STEP, "[]", wake_at=when.timestamp())


def wait_for_signal(name: str, timeout: float | None = None, *, default: Any = None) -> Any:
    """Wait for the next signal ``name``; return its payload, or ``default`` (None unless
    given) after ``timeout`` s.

    A signal sent without a payload has the payload None, so a body that must tell it from
    a timeout passes a ``default`` no payload is, e.g. ``default=TIMED_OUT`` for a module
    constant ``TIMED_OUT = object()`` (it is returned, never stored). Replay returns the
    same: the step records whether it timed out.

    The run is suspended while it waits (status WAITING, no worker held). Signals of one
    name are consumed in the order sent, each by exactly one call. In an async workflow,
    await it: ``await cd.wait_for_signal("approve")``.
    """
    ctx = enter_body("celery_durable.wait_for_signal()")
    check_signal_name(name)
    if timeout is not None and (timeout != timeout or timeout < 0):
        raise ValueError(f"wait_for_signal(timeout) must be None or >= 0, got {timeout!r}")
    step_name = SIGNAL_STEP_PREFIX + name
    return wait_step(ctx, step_name, "[]", timeout=timeout, signal=name, default=default)


def check_signal_name(name: str) -> None:
    validate.check_signal_name(name)
