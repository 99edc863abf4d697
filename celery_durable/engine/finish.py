"""Finishing a run: the one write that ends it (succeeded, failed for good or cancelled).
A child's finish also settles its parent's item and wakes the parent, in the same
transaction. ``settle`` and ``rollback`` both end here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery_durable.body.context import WorkflowContext
from celery_durable.canvas.reports import report_settled
from celery_durable.core import faults
from celery_durable.engine.publish import publish_woken
from celery_durable.store import FINISHED_STATUSES, OwedReport, StepRecord

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
    Then the run tells Celery (result backend, callbacks, chain, chord), if it has to."""
    final = _settle(runtime, ctx, status, result=result, error=error, step=step)
    if final in FINISHED_STATUSES and ctx.canvas is not None:
        succeeded, failed = final == "SUCCEEDED", final == "FAILED"
        owed = OwedReport(
            ctx.workflow_id,
            ctx.workflow_name,
            final,
            "",
            result if succeeded else None,
            error if failed else None,
            None,
            ctx.canvas,
        )
        faults.reach(faults.BEFORE_REPORT, **ctx.log_fields())
        report_settled(runtime, owed)
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
            ctx.workflow_id,
            ctx.fence,
            status,
            result=result,
            error=error,
            step=step,
            carried=ctx.take_deferred(),
        )
    final, woken = store.settle_child_run(
        ctx.workflow_id,
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
    publish_woken(runtime, woken, f"its child {ctx.workflow_id} finished")
    return final
