"""The engine's side of ``continue_as_new``: switch the run to its next generation in one
transaction, then publish it (a lost publish is the sweeper's, after the dispatch grace).

Example::

    settle_continued(durable, ctx, exc)      # from settle, for a ContinuedAsNew
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import WorkflowContext
from celery_durable.engine.publish import publish_woken
from celery_durable.errors import ContinuedAsNew
from celery_durable.sagas.rollback import finish_or_roll_back

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.workflow")


def settle_continued(runtime: RuntimeView, ctx: WorkflowContext, exc: ContinuedAsNew) -> Any:
    fields = ctx.log_fields()
    carried = ctx.take_deferred()
    due = runtime.store.continue_as_new(
        ctx.workflow_id, ctx.fence, exc.args_encoded, runtime.config.dispatch_grace, carried
    )
    if due == "CANCELLED":
        finish_or_roll_back(runtime, ctx, "CANCELLED", None, None)
        logger.info(
            "workflow %s run %s cancelled (instead of continuing as new)",
            ctx.workflow_name,
            ctx.workflow_id,
            extra=fields,
        )
        return None
    if due is None or isinstance(due, str):
        logger.warning(
            "workflow %s run %s lost its lease before continuing as new; its new owner decides",
            ctx.workflow_name,
            ctx.workflow_id,
            extra=fields,
        )
        return None
    logger.info(
        "workflow %s run %s continued as new (its history is archived)",
        ctx.workflow_name,
        ctx.workflow_id,
        extra=fields,
    )
    publish_woken(runtime, due, "it continued as new")
    return "continued as new"
