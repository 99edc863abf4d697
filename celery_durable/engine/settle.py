"""Settling an attempt: success, failure (retry or for good), cancellation, suspension.

Every way out of a workflow body ends in one of these; each writes the run's outcome (and
the failed step's record, if it still has to be written) in one statement or transaction.
The features take part through their settle listeners (``runtime_view.SettleListener``):
a continue as new settles its own stop, a saga rolls back before it ends, and a run that
reports tells Celery of its wait and of its end.
A delivery that ends without the run's result or failure raises
``DeliveryEnded``, so Celery never reports it a SUCCESS.

Example::

    status = settle_success(durable, ctx, encoded_result)   # inside execute()
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from celery.exceptions import Retry

from celery_durable.body.context import WorkflowContext
from celery_durable.core import faults, serialization
from celery_durable.core.retry import backoff, retryable
from celery_durable.engine import shutdown, taskevents
from celery_durable.engine.finish import finish
from celery_durable.engine.publish import publish_woken
from celery_durable.errors import (
    LeaseLost,
    StoreUnavailable,
    Suspended,
    WorkflowCancelled,
)
from celery_durable.store import Claim, StepRecord
from celery_durable.store.areas import CHILD_SETTLES

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.workflow")


def settle_stop_or_error(
    runtime: RuntimeView, ctx: WorkflowContext, claim: Claim, exc: BaseException
) -> Any:
    fields = ctx.log_fields()
    name, run_id, app = ctx.workflow_name, ctx.run_id, runtime.app
    if isinstance(exc, Suspended):
        logger.info(
            "workflow %s run %s is %s; its worker slot is free",
            name,
            run_id,
            exc.reason,
            extra=fields,
        )
        line = taskevents.ctx_line(ctx, max(ctx.next_index - 1, 0))  # the wait's step
        for listener in runtime.hooks.settle_listeners:
            listener.waiting(runtime, ctx, exc.reason)
        raise taskevents.ended(app, run_id, taskevents.WAITING, f"{exc.reason} {line}")
    if isinstance(exc, LeaseLost):
        logger.warning(
            "workflow %s run %s lost its lease; another worker owns it now",
            name,
            run_id,
            extra=fields,
        )
        raise taskevents.ended(app, run_id, None, "lease lost; another delivery owns the run")
    for listener in runtime.hooks.settle_listeners:
        listener.stopped(runtime, ctx, exc)  # a continue as new: settled, and raised
    if isinstance(exc, WorkflowCancelled) and exc.run_id == run_id:
        if _finish_for_good(runtime, ctx, "CANCELLED", None, None):
            faults.reach(faults.AFTER_SETTLE, **fields)
            logger.info("workflow %s run %s cancelled: %s", name, run_id, exc.reason, extra=fields)
            raise _cancelled(runtime, ctx, exc.reason)
        raise taskevents.ended(app, run_id, None, "lease lost before the cancel was settled")
    if isinstance(exc, StoreUnavailable):
        logger.error(
            "workflow %s run %s stopped: %s; the sweeper resumes it once its lease expires",
            name,
            run_id,
            exc,
            extra=fields,
        )
        raise exc.__cause__ or RuntimeError(str(exc))
    return _settle_error(runtime, ctx, claim, exc)


def settle_success(runtime: RuntimeView, ctx: WorkflowContext, encoded: str) -> None:
    """Store the result; raises DeliveryEnded when the run was cancelled or lost instead."""
    fields = ctx.log_fields()
    failed = ctx.failed_step
    caught = failed.record if failed is not None and not failed.written else None
    status = finish(runtime, ctx, "SUCCEEDED", result=encoded, step=caught)
    faults.reach(faults.AFTER_SETTLE, **fields)
    if status == "SUCCEEDED":
        logger.info("workflow %s run %s succeeded", ctx.workflow_name, ctx.run_id, extra=fields)
        return
    if status == "CANCELLED":
        logger.info(
            "workflow %s run %s cancelled (cancel was requested before it settled)",
            ctx.workflow_name,
            ctx.run_id,
            extra=fields,
        )
        raise _cancelled(runtime, ctx)
    logger.warning(
        "workflow %s run %s finished but lost its lease before settling",
        ctx.workflow_name,
        ctx.run_id,
        extra=fields,
    )
    raise taskevents.ended(runtime.app, ctx.run_id, None, "lease lost before settling")


def _finish_for_good(
    runtime: RuntimeView,
    ctx: WorkflowContext,
    status: str,
    error: str | None,
    step: StepRecord | None,
) -> str | None:
    """End a run that fails for good or is cancelled: as a settle listener ends it (a
    saga rolls back first), or with the plain finish."""
    for listener in runtime.hooks.settle_listeners:
        finishing = listener.finishing(runtime, ctx, status, error, step)
        if finishing is not None:
            return finishing()
    return finish(runtime, ctx, status, error=error, step=step)


def _cancelled(
    runtime: RuntimeView, ctx: WorkflowContext, reason: str | None = None
) -> taskevents.DeliveryEnded:
    text = f"cancelled: {reason or 'cancel requested'} {taskevents.ctx_line(ctx)}"
    return taskevents.ended(runtime.app, ctx.run_id, taskevents.CANCELLED, text)


def _child_cancelled_on_retry(runtime: RuntimeView, ctx: WorkflowContext) -> None:
    """A child cancelled while scheduling its retry: its parent's item learns it now."""
    if ctx.parent_id is not None and ctx.parent_idx is not None:
        woken = CHILD_SETTLES.of(runtime.store).settle_child_item(
            ctx.parent_id, ctx.parent_idx, ctx.run_id, runtime.config.dispatch_grace
        )
        publish_woken(runtime, woken, f"its child {ctx.run_id} was cancelled")


def _ended_the_attempt(ctx: WorkflowContext, exc: BaseException) -> bool:
    """Whether the last failed step's exception (or a cause of it) ended this attempt."""
    if ctx.failed_step is None:
        return False
    seen: BaseException | None = exc
    for _ in range(100):  # exception chains can loop
        if seen is None:
            return False
        if seen is ctx.failed_step.exc:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _settle_error(
    runtime: RuntimeView, ctx: WorkflowContext, claim: Claim, exc: BaseException
) -> Any:
    store, config = runtime.store, runtime.config
    # Which step's failure ended the attempt, kept with the error: a resume runs that step
    # again instead of replaying its failure.
    ended = ctx.failed_step.record.idx if ctx.failed_step and _ended_the_attempt(ctx, exc) else None
    error = serialization.encode_error(exc, step=ended)
    fields = ctx.log_fields()
    # KeyboardInterrupt, SystemExit, ...; not a child's WorkflowCancelled (a recorded
    # outcome re-raised in this body: the run fails).
    interrupted = not isinstance(exc, Exception) and not getattr(exc, "final", False)
    stopped_by = shutdown.interruption(exc, ctx.hard_deadline)
    if stopped_by is not None:
        # Give the lease back at once; not a failed attempt. After a revoke the sweeper's
        # cancel finds the run PENDING and cancels it.
        if store.release_run(ctx.run_id, ctx.fence):
            logger.warning(
                "workflow %s run %s interrupted by %s; lease given back, attempt %d of %d "
                "not counted",
                ctx.workflow_name,
                ctx.run_id,
                stopped_by,
                claim.attempts,
                claim.max_attempts,
                extra=fields,
            )
        raise exc
    if retryable(exc) and claim.attempts < claim.max_attempts:
        delay = (
            0.0
            if interrupted
            else backoff(claim.retry_backoff, claim.attempts - 1, config.max_retry_backoff)
        )
        faults.reach(faults.BEFORE_SCHEDULE_RETRY, **fields)
        # The failed step's record goes with the retry, in one transaction: "retry" (runs
        # again) if its failure ended the attempt, "error" (replays) if the body caught it.
        status = store.schedule_retry(
            ctx.run_id,
            ctx.fence,
            delay,
            error,
            _failed_step_record(ctx, exc, "retry"),
            ctx.take_deferred(),
        )
        if status == "PENDING":
            logger.warning(
                "workflow %s run %s failed on attempt %d of %d, retrying in %.1fs: %r",
                ctx.workflow_name,
                ctx.run_id,
                claim.attempts,
                claim.max_attempts,
                delay,
                exc,
                extra=fields,
            )
        elif status == "CANCELLED":
            _child_cancelled_on_retry(runtime, ctx)
            _log_cancelled_after_failure(ctx)
            raise _cancelled(runtime, ctx)
        else:
            _log_lost_at_settle(ctx)
        if interrupted:
            raise exc
        when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=delay)
        # The message is the result Flower shows for RETRY (taskevents.WorkflowRequest).
        message = f"retry attempt {claim.attempts + 1} at {when.isoformat()} {_line(ctx)}"
        raise Retry(message, exc=exc, when=when) from exc
    status = _finish_for_good(runtime, ctx, "FAILED", error, _failed_step_record(ctx, exc))
    if status == "CANCELLED":
        _log_cancelled_after_failure(ctx)
        raise _cancelled(runtime, ctx)
    if status == "FAILED":
        faults.reach(faults.AFTER_SETTLE, **fields)
        logger.error(
            "workflow %s run %s failed for good on attempt %d of %d: %r",
            ctx.workflow_name,
            ctx.run_id,
            claim.attempts,
            claim.max_attempts,
            exc,
            extra=fields,
        )
        # Celery's FAILURE follows and wins; this carries the run's line into its result.
        text = f"failed for good on attempt {claim.attempts} of {claim.max_attempts} {_line(ctx)}"
        taskevents.emit(runtime.app, ctx.run_id, taskevents.FAILING, result=text)
    else:
        _log_lost_at_settle(ctx)
    if not isinstance(exc, Exception) and not interrupted:
        # A child's WorkflowCancelled: settled; as a BaseException it would kill the pool
        # process, so Celery gets its FAILURE as an Exception.
        raise taskevents.RunFailed(f"{type(exc).__name__}: {exc}") from exc
    raise exc


def _line(ctx: WorkflowContext) -> str:
    """The run's line at the step that failed (or the next one)."""
    failed = ctx.failed_step
    if failed is None:
        return taskevents.ctx_line(ctx)
    return taskevents.ctx_line(ctx, failed.record.idx, failed.record.name)


def _failed_step_record(
    ctx: WorkflowContext, exc: BaseException, status_if_ended: str = "error"
) -> StepRecord | None:
    """The record of the last failed step, if it still has to be written with the settle."""
    failed = ctx.failed_step
    if failed is None:
        return None
    if _ended_the_attempt(ctx, exc):
        return dataclasses.replace(failed.record, status=status_if_ended)
    return None if failed.written else failed.record


def _log_cancelled_after_failure(ctx: WorkflowContext) -> None:
    logger.info(
        "workflow %s run %s cancelled (it failed after cancel was requested)",
        ctx.workflow_name,
        ctx.run_id,
        extra=ctx.log_fields(),
    )


def _log_lost_at_settle(ctx: WorkflowContext) -> None:
    logger.warning(
        "workflow %s run %s lost its lease before settling; its new owner decides",
        ctx.workflow_name,
        ctx.run_id,
        extra=ctx.log_fields(),
    )
