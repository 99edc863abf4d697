"""Finishing a run: the one write that ends it (succeeded, failed for good or cancelled).
A child's finish also settles its parent's item and wakes the parent, in the same
transaction, and the settle listeners of the delivery hooks hear of it (``engine.hooks``).
``settle`` and ``rollback`` both end here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery_durable.body.context import WorkflowContext
from celery_durable.engine.publish import publish_woken
from celery_durable.store import FINISHED_STATUSES, StepRecord
from celery_durable.store.areas import CHILD_SETTLES

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView


def finish(
    runtime: RuntimeView,
    ctx: WorkflowContext,
    status: str,
    *,
    result: str | None = None,
    error: str | None = None,
    step: StepRecord | None = None,
) -> str | None:
    """Settle the run; a child's settle also gives its parent's item the outcome (and
    wakes the parent), in the same transaction. Ordinary runs keep the one statement.
    Then the settle listeners hear of a final status (a run that reports tells Celery:
    result backend, callbacks, chain, chord)."""
    final = _settle(runtime, ctx, status, result=result, error=error, step=step)
    if final in FINISHED_STATUSES:
        succeeded, failed = final == "SUCCEEDED", final == "FAILED"
        result, error = result if succeeded else None, error if failed else None
        for listener in runtime.hooks.settle_listeners:
            listener.settled(runtime, ctx, final, result, error)
    return final


def _settle(
    runtime: RuntimeView,
    ctx: WorkflowContext,
    status: str,
    *,
    result: str | None,
    error: str | None,
    step: StepRecord | None,
) -> str | None:
    store = runtime.store
    if ctx.parent_id is None or ctx.parent_idx is None:
        return store.settle_run(
            ctx.run_id,
            ctx.fence,
            status,
            result=result,
            error=error,
            step=step,
            carried=ctx.take_deferred(),
        )
    final, woken = CHILD_SETTLES.of(store).settle_child_run(
        ctx.run_id,
        ctx.fence,
        status,
        parent_id=ctx.parent_id,
        parent_idx=ctx.parent_idx,
        grace=runtime.config.dispatch_grace,
        result=result,
        error=error,
        step=step,
        carried=ctx.take_deferred(),
    )
    publish_woken(runtime, woken, f"its child {ctx.run_id} finished")
    return final
