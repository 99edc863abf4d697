"""Sagas: steps with a compensation, undone in reverse order when the run rolls back.

``@durable.step(compensate=refund)`` names what undoes a step: ``refund(*args,
result=<the step's recorded output>, **kwargs)``. A rollback (the run failing for good, a
cancel, or ``cd.compensate()`` in the body) runs the compensations of the finished steps,
latest first, each recorded as a step of its own at the next index: a crash during the
rollback resumes it where it stopped, and replay never runs one twice.

Example::

    @durable.step(compensate=refund)
    def charge(order_id: int, amount: int) -> str: ...

    @durable.workflow
    def checkout(order_id: int) -> dict:
        receipt = charge(order_id, 100)
        if not ship(order_id):
            cd.compensate()                    # refund(order_id, 100, result=receipt)
            return {"status": "rolled back"}
        return {"receipt": receipt}

A run that has finished a step with a compensation is marked compensable (on the run, so
that a cancel while it waits rolls it back, and in its context's wing state): the step
guard ``MarkCompensable`` does it, registered by wiring.py.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery_durable.body.context import RunningStep, StepGuard, WorkflowContext, enter_body
from celery_durable.body.replay import (
    check_replay,
    record_fenced,
    stop_writing,
    store_guard,
    write_caught_failure,
)
from celery_durable.body.step import COMPENSATED, Step
from celery_durable.core import serialization
from celery_durable.sagas.store import SAGAS
from celery_durable.store import StepRecord
from celery_durable.store.engine_names import COMPENSATE_STEP_PREFIX, Compensation

logger = logging.getLogger("celery_durable.step")

ROLLBACK_STEP = "celery_durable.rollback"


def compensate() -> list[Compensation]:
    """Run now, latest first, the compensations of the steps this run finished that were
    not compensated yet; returns what ran. The body goes on afterwards (return or raise
    what it likes); a later failure of the run does not compensate these steps again."""
    ctx = enter_body("celery_durable.compensate()")
    write_caught_failure(ctx)
    return run_compensations(ctx)


def pending_compensations(ctx: WorkflowContext) -> list[StepRecord]:
    """The finished steps before the body's position that have a compensation not run
    yet, latest first (the order a rollback undoes them)."""
    before = ctx.next_index
    done = set()
    for idx, recorded in ctx.history.items():
        ran = Compensation.of(recorded) if idx < before else None
        if ran is not None:
            done.add(ran.index)
    return [
        recorded
        for idx, recorded in sorted(ctx.history.items(), reverse=True)
        if idx < before
        and recorded.status == "ok"
        and recorded.name in COMPENSATED
        and idx not in done
        and undone_call(recorded) is not None
    ]


def undone_call(recorded: StepRecord) -> tuple[list[Any], dict[str, Any], Any] | None:
    """The call a compensation undoes: (args, kwargs, the step's output). A routed step's
    record (``{"fanout": "task", ...}``) holds its call and a one-item output. None when no
    one call succeeded: a routed step whose task failed, a map's items, a child."""
    called = serialization.loads(recorded.input)
    if isinstance(called, list):
        args, kwargs = called
        return args, kwargs, serialization.loads(recorded.output or "null")
    if called.get("fanout") == "task" and not recorded.error:
        args, kwargs = called["input"]
        return args, kwargs, serialization.loads(recorded.output or "[null]")[0]
    return None


def run_compensations(ctx: WorkflowContext) -> list[Compensation]:
    """Compensate what ``pending_compensations`` lists, each a recorded step."""
    ran = []
    for original in pending_compensations(ctx):
        ran.append(_compensate_one(ctx, original))
    return ran


def write_fenced(ctx: WorkflowContext, step: StepRecord) -> None:
    """Record a rollback's step under the fence (a requested cancel does not stop it),
    after the deferred steps' records the run still holds."""
    for carried in ctx.take_deferred():
        record_fenced(ctx, carried)
    record_fenced(ctx, step)


def _compensate_one(ctx: WorkflowContext, original: StepRecord) -> Compensation:
    step = COMPENSATED[original.name]
    name = COMPENSATE_STEP_PREFIX + original.name
    step_input = serialization.dumps({"of": original.idx})
    index = ctx.take_index(bounded=False)
    recorded = ctx.history.get(index)
    if recorded is not None:
        check_replay(ctx, index, recorded, name, step_input)
        if recorded.status in ("ok", "error"):
            done = Compensation.of(recorded)
            assert done is not None
            return done
    call = undone_call(original)
    assert call is not None  # pending_compensations lists only these
    args, kwargs, result = call
    undo: Any = step.options.compensate
    policy = undo if isinstance(undo, Step) else None
    function = undo.fn if isinstance(undo, Step) else undo
    attempts = policy.options.max_attempts if policy else 1
    started = time.monotonic()
    for attempt in range(1, attempts + 1):
        ctx.in_step = True
        try:
            value = function(*args, result=result, **kwargs)
            output = serialization.encode_value(
                f"compensation {name}", value, ctx.max_payload_bytes, ctx.max_payload_depth
            )
        except Exception as exc:
            if attempt < attempts and policy is not None and policy.retryable(exc):
                delay = policy.delay_after(attempt)
                logger.warning(
                    "compensation of step %d (%s) failed (attempt %d of %d), retrying in %.2fs: %r",
                    original.idx,
                    original.name,
                    attempt,
                    attempts,
                    delay,
                    exc,
                    extra=ctx.log_fields(index),
                )
                time.sleep(delay)
                continue
            logger.error(
                "compensation of step %d (%s) failed for good: %r",
                original.idx,
                original.name,
                exc,
                extra=ctx.log_fields(index),
            )
            error = serialization.encode_error(exc)
            took = time.monotonic() - started
            failed = StepRecord(index, name, "error", step_input, None, error, took, began=started)
            write_fenced(ctx, failed)
            done = Compensation.of(failed)
            assert done is not None
            return done
        finally:
            ctx.in_step = False
        took = time.monotonic() - started
        done_ok = StepRecord(index, name, "ok", step_input, output, None, took, began=started)
        write_fenced(ctx, done_ok)
        return Compensation(original.name, original.idx, "ok")
    raise AssertionError("unreachable")  # pragma: no cover


WING = "saga"  # True among the context's wing states once the run is compensable


def is_compensable(ctx: WorkflowContext) -> bool:
    """The run has finished a step with a compensation (a rollback has work to do)."""
    return bool(ctx.wings.get(WING))


class MarkCompensable(StepGuard):
    """The step guard of sagas: the first finished step with a compensation marks the
    run, once, so that cancelling it while it waits rolls it back."""

    def step_ok(self, ctx: WorkflowContext, step: RunningStep) -> None:
        if step.options.compensate is None or is_compensable(ctx):
            return
        with store_guard(ctx):
            marked = SAGAS.of(ctx.store).mark_compensable(ctx.run_id, ctx.fence)
        if not marked:
            stop_writing(ctx)
        ctx.wings[WING] = True
