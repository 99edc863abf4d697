"""The engine's side of ``continue_as_new``: switch the run to its next generation in one
transaction, then publish it (a lost publish is the sweeper's, after the dispatch grace).

``Continued`` is the settle listener (wiring.py registers it) that settles the stop.

Example::

    settle_continued(durable, ctx, exc)      # from settle, for a ContinuedAsNew
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import WorkflowContext
from celery_durable.engine import taskevents
from celery_durable.engine.publish import publish_woken
from celery_durable.engine.runtime_view import SettleListener
from celery_durable.errors import ContinuedAsNew
from celery_durable.sagas.rollback import finish_or_roll_back
from celery_durable.sagas.store import SAGAS

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.workflow")


def settle_continued(runtime: RuntimeView, ctx: WorkflowContext, exc: ContinuedAsNew) -> Any:
    fields = ctx.log_fields()
    carried = ctx.take_deferred()
    due = SAGAS.of(runtime.store).continue_as_new(
        ctx.run_id, ctx.fence, exc.args_encoded, runtime.config.dispatch_grace, carried
    )
    if due == "CANCELLED":
        finish_or_roll_back(runtime, ctx, "CANCELLED", None, None)
        logger.info(
            "workflow %s run %s cancelled (instead of continuing as new)",
            ctx.workflow_name,
            ctx.run_id,
            extra=fields,
        )
        return None
    if due is None or isinstance(due, str):
        logger.warning(
            "workflow %s run %s lost its lease before continuing as new; its new owner decides",
            ctx.workflow_name,
            ctx.run_id,
            extra=fields,
        )
        return None
    logger.info(
        "workflow %s run %s continued as new (its history is archived)",
        ctx.workflow_name,
        ctx.run_id,
        extra=fields,
    )
    publish_woken(runtime, due, "it continued as new")
    return "continued as new"


class Continued(SettleListener):
    """The settle listener of ``continue_as_new``: its stop is settled here."""

    def stopped(self, runtime: RuntimeView, ctx: WorkflowContext, stop: BaseException) -> None:
        if not isinstance(stop, ContinuedAsNew):
            return
        app, run_id = runtime.app, ctx.run_id
        if settle_continued(runtime, ctx, stop) is None:
            raise taskevents.ended(app, run_id, None, "not continued: cancelled or lease lost")
        # The same task id is published again: to Celery this delivery is a retry.
        text = f"continued as new {taskevents.ctx_line(ctx)}"
        raise taskevents.ended(app, run_id, taskevents.RETRIED, text)
