"""Deadlines (``timeout=``): the sweeper cancels each active run past its deadline, with
the reason "deadline exceeded". A pending or waiting run ends at once (a saga rolls back
first); a running one at its next step, or at once in a step with
``terminate_on_timeout=True`` (which its own worker stops at the deadline).

Example::

    cancel_overdue(runtime)      # one sweep's pass
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery_durable.core.logs import run_fields
from celery_durable.fanout.item_tasks import cancel

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.sweeper")

DEADLINE_EXCEEDED = "deadline exceeded"


def cancel_overdue(runtime: RuntimeView, batch: int | None = None) -> int:
    """Cancel the runs past their deadline (``batch`` at most, by default
    ``durable_sweep_batch``); returns how many were told to stop."""
    told = 0
    for run_id in runtime.store.overdue_runs(batch or runtime.config.sweep_batch):
        cancelled = cancel(runtime, run_id, DEADLINE_EXCEEDED)
        if cancelled.requested:
            told += 1
            logger.info(
                "workflow run %s passed its deadline: cancelled (now %s)",
                run_id,
                cancelled.status,
                extra=run_fields(run_id),
            )
    return told
