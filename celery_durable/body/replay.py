"""Replay: the kernel every body call stands on. A call's record is written under the
run's fencing token (``record``), checked against history when it replays
(``check_replay``), and any failed fenced write or database error stops the body in a way
user code can't swallow (``stop_writing``, ``store_guard``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from celery_durable.body.context import WorkflowContext
from celery_durable.body.event_loop import others_running, uninterrupted
from celery_durable.core import faults
from celery_durable.core.off_loop import off_loop
from celery_durable.errors import (
    LeaseLost,
    NonDeterminismError,
    StoreUnavailable,
    WorkflowCancelled,
)
from celery_durable.store import Outcome, StepRecord, StepWrite
from celery_durable.store.areas import FENCED_WRITES

logger = logging.getLogger("celery_durable.step")


def check_replay(
    ctx: WorkflowContext, index: int, recorded: StepRecord, name: str, step_input: str
) -> None:
    """Raise NonDeterminismError when the code no longer calls what history recorded."""
    if recorded.name != name:
        raise NonDeterminismError(
            f"workflow {ctx.workflow_name} run {ctx.run_id!r}: step {index} is "
            f"{name!r} in the code but {recorded.name!r} in the recorded history"
            + _changed_code_hint(ctx, index)
        )
    if recorded.input != step_input:
        raise NonDeterminismError(
            f"workflow {ctx.workflow_name} run {ctx.run_id!r}: step {index} ({name}) "
            f"was called with different input: recorded {_clip(recorded.input)}, "
            f"now {_clip(step_input)}" + _changed_code_hint(ctx, index)
        )


def _changed_code_hint(ctx: WorkflowContext, index: int) -> str:
    return (
        ". If the workflow's code changed while this run was in flight, guard the change "
        'with `if celery_durable.patched("<change-id>"):` (runs that passed this point '
        "before the deploy get False and keep the old branch), or restart the run on "
        f"today's code from before this step: `celery -A <app> durable fork "
        f"{ctx.run_id} --from-step {index}`"
    )


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def stop_writing(ctx: WorkflowContext) -> NoReturn:
    """A fenced write failed: raise WorkflowCancelled or LeaseLost, whichever is true."""
    with store_guard(ctx):
        run = ctx.store.get_run(ctx.run_id)
    if run is not None and run.fence == ctx.fence and run.cancel_requested:
        raise ctx.stop(WorkflowCancelled(ctx.run_id, run.cancel_reason))
    raise ctx.stop(LeaseLost(f"run {ctx.run_id!r} is no longer owned by this worker"))


@contextmanager
def store_guard(ctx: WorkflowContext) -> Iterator[None]:
    """A database error inside the body becomes StoreUnavailable, which user code's
    ``except Exception`` can't swallow; the run is then left to its lease."""
    try:
        yield
    except Exception as exc:
        stopped = StoreUnavailable(f"run {ctx.run_id!r}: the store failed: {exc!r}")
        raise ctx.stop(stopped) from exc


def confirm_lease(ctx: WorkflowContext) -> None:
    """Before a step's side effects: if the heartbeat hasn't extended the lease lately (the
    process was paused?), extend it in one fenced statement, or stop: a new owner may
    have run this very step already."""
    if not ctx.lease.doubtful():
        return
    with store_guard(ctx):
        still_ours = ctx.store.renew_lease(ctx.run_id, ctx.fence, ctx.lease.lease)
    if not still_ours:
        stop_writing(ctx)
    ctx.lease.renewed()


def write_caught_failure(ctx: WorkflowContext) -> None:
    """The body caught a step failure and goes on: record it, so replay raises it again."""
    failed = ctx.failed_step
    if failed is not None and not failed.written:
        failed.written = True
        record(ctx, failed.record)


def flush_deferred(ctx: WorkflowContext) -> None:
    """Write the buffered records of deferred steps on their own (a bound was reached)."""
    if ctx.deferred:
        last = ctx.deferred.pop()
        record(ctx, last)


def record_fenced(ctx: WorkflowContext, step: StepRecord) -> None:
    """Record ``step`` while this worker holds the run, whether or not its cancellation
    was requested (a rollback's steps, a step that finished after the cancel)."""
    # Raised as such even when the body already stopped (a cancel): the rollback's caller
    # tells a lost lease from an outage, whatever stopped the body.
    stop: BaseException
    try:
        written = FENCED_WRITES.of(ctx.store).record_fenced_step(ctx.run_id, ctx.fence, step)
    except Exception as exc:
        stop = StoreUnavailable(f"run {ctx.run_id!r}: the store failed: {exc!r}")
        ctx.stop(stop)
        raise stop from exc
    if not written:
        stop = LeaseLost(f"run {ctx.run_id!r} is no longer owned by this worker")
        ctx.stop(stop)
        raise stop
    ctx.history[step.idx] = step
    faults.reach(faults.AFTER_RECORD_STEP, **ctx.log_fields(step.idx))


def record(ctx: WorkflowContext, step: StepRecord) -> StepRecord:
    """Persist a step under the run's fencing token, with the deferred steps' records the
    run holds; stop the body if the lease is gone or the run's cancellation was requested
    (then after recording them all the same: they ran, so a rollback compensates them)."""
    carried = ctx.take_deferred()
    return _written(ctx, step, carried, _write(ctx, step, carried))


async def arecord(ctx: WorkflowContext, step: StepRecord) -> StepRecord:
    """``record`` for an async body's step. While other steps of the body run, the write
    runs on a writer thread, so steps that finish together commit together (where the
    database allows it: Postgres takes a shared lock on the run row; SQLite writes one
    transaction at a time). A step running alone writes on the loop, as a plain body
    does: nothing else of the run waits, and no thread hand-off is paid."""
    carried = ctx.take_deferred()
    if carried or ctx.record_with is not None or not others_running():
        return _written(ctx, step, carried, _write(ctx, step, carried))
    # A cancel of the body while the write is in flight waits for it: the step finished,
    # so it is recorded (or found cancelled: recorded all the same, see _written).
    written, cancelled = await uninterrupted(off_loop(_write, ctx, step, carried))
    stored = _written(ctx, step, carried, written)
    if cancelled:
        raise asyncio.CancelledError()
    return stored


def _write(ctx: WorkflowContext, step: StepRecord, carried: list[StepRecord]) -> StepWrite:
    record_with = ctx.record_with  # a step guard's record, one statement too
    with store_guard(ctx):
        written = None if record_with is None or carried else record_with(step)
        if written is None:
            written = ctx.store.record_step(ctx.run_id, ctx.fence, step, carried=carried)
    return written


def _written(
    ctx: WorkflowContext, step: StepRecord, carried: list[StepRecord], written: StepWrite
) -> StepRecord:
    """What a step's write did: the record replay will agree with, or the body stops."""
    if written.outcome is Outcome.RECORDED:
        ctx.history[step.idx] = step
        for each in (*carried, step):
            logger.debug(
                "workflow %s run %s: step %d (%s) recorded %s%s",
                ctx.workflow_name,
                ctx.run_id,
                each.idx,
                each.name,
                each.status,
                " (deferred)" if each is not step else "",
                extra=ctx.log_fields(each.idx),
            )
        faults.reach(faults.AFTER_RECORD_STEP, **ctx.log_fields(step.idx))
        return step
    if written.outcome is Outcome.CANCELLED:
        # The cancel came while the step ran: it finished, its side effects happened, so it
        # is history like any other step; the cancel takes effect here, at the boundary.
        for each in (*carried, step):
            record_fenced(ctx, each)
        stop_writing(ctx)
    if written.stored is None:
        stop_writing(ctx)
    # An earlier write of this step committed (e.g. interrupted after the server's
    # commit): keep what is stored, so every replay agrees with it.
    check_replay(ctx, step.idx, written.stored, step.name, step.input)
    ctx.history[step.idx] = written.stored
    return written.stored
