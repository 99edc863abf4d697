"""Where the canvas plugs into the kernel: the settle listener of a run that reports, and
the sweep pass of the reports still owed a dispatch grace after their run settled (the
worker died between its settle and its report). ``wiring.py`` registers both.

Example::

    runtime.hooks.settle_listeners.append(Report())
    runtime.sweep_passes.append(SweepPass("owed reports", OwedReports(runtime), publishes=False))
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.canvas.outbox import CANVAS
from celery_durable.canvas.reports import (
    WING,
    Canvas,
    report_owed,
    report_settled,
    report_taken,
    store_state,
)
from celery_durable.core import faults
from celery_durable.core.logs import run_fields
from celery_durable.engine.runtime_view import SettleListener
from celery_durable.store import OwedReport

if TYPE_CHECKING:
    from celery_durable.body.context import WorkflowContext
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.worker")


class OwedReports:
    """Report each owed entry once, a page of ``durable_sweep_batch`` at a time."""

    def __init__(self, runtime: RuntimeView) -> None:
        self.runtime = runtime

    def __call__(self) -> None:
        runtime, config = self.runtime, self.runtime.config
        outbox = CANVAS.of(runtime.store)
        while True:
            owed = outbox.take_owed_reports(config.dispatch_grace, config.sweep_batch)
            outcomes = {entry: report_owed(runtime, entry) for entry in owed}
            outbox.clear_reported([e.id for e, outcome in outcomes.items() if outcome])
            for entry, outcome in outcomes.items():
                if outcome == "made":
                    logger.warning(
                        "reported workflow %s run %s (%s) to Celery: the worker that "
                        "settled it did not (it died after the settle?)",
                        entry.name,
                        entry.id,
                        entry.status,
                        extra=run_fields(entry.id, entry.name),
                    )
            if len(owed) < config.sweep_batch:
                break


class Report(SettleListener):
    """The settle listener of a run that reports: its wait and its end, told to Celery."""

    def waiting(self, runtime: RuntimeView, ctx: WorkflowContext, reason: str) -> None:
        """WAITING (``reason``) for ``app.AsyncResult``: one backend round trip per
        suspension of a run that reports. Not a ready state: ``.get()`` goes on waiting."""
        if (stored := ctx.wings.get(WING)) is not None and Canvas.decode(stored).report:
            store_state(runtime, ctx.run_id, ctx.workflow_name, reason, "WAITING")

    def cancelled(self, runtime: RuntimeView, run_id: str) -> None:
        """Its link_error and REVOKED, now: no delivery of it settles it."""
        report_taken(runtime, run_id)

    def settled(
        self, runtime: RuntimeView, ctx: WorkflowContext, status: str, result: Any, error: Any
    ) -> None:
        if (canvas := ctx.wings.get(WING)) is not None:
            run = (ctx.run_id, ctx.workflow_name, status, "", result, error, None, canvas)
            faults.reach(faults.BEFORE_REPORT, **ctx.log_fields())
            report_settled(runtime, OwedReport(*run))
