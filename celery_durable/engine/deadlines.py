"""Deadlines (``timeout=``): the sweeper cancels each active run past its deadline, with
the reason "deadline exceeded". A pending or waiting run ends at once (a saga rolls back
first); a running one at its next step, or at once in a step with
``terminate_on_timeout=True`` (which its own worker stops at the deadline: the step
guard ``TerminateAtDeadline``, with the delivery hook ``note_deadline`` that keeps the
run's deadline in its context; wiring.py registers both).

Example::

    cancel_overdue(runtime)      # one sweep's pass
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import StepGuard
from celery_durable.core.logs import run_fields
from celery_durable.engine.cancel import cancel

if TYPE_CHECKING:
    from celery_durable.body.context import DispatchView, RunningStep, WorkflowContext
    from celery_durable.engine.hooks import Delivery
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.sweeper")

DEADLINE_EXCEEDED = "deadline exceeded"
WING = "deadline"  # the run's deadline (epoch seconds) among its context's wing states


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


def deadline_of(ctx: WorkflowContext) -> float | None:
    """The run's deadline (epoch seconds), at which it is cancelled; None: it has none."""
    deadline: float | None = ctx.wings.get(WING)
    return deadline


def note_deadline(delivery: Delivery) -> None:
    """Before the body: a run with a deadline keeps it in its context."""
    claim = delivery.claim
    if claim is not None and claim.deadline_at is not None:
        delivery.wings[WING] = claim.deadline_at


class TerminateAtDeadline(StepGuard):
    """The step guard of ``terminate_on_timeout``: at the run's deadline, the step is
    stopped at once (the run is then cancelled: "deadline exceeded")."""

    def around(
        self,
        ctx: WorkflowContext,
        step: RunningStep,
        index: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> AbstractContextManager[None]:
        deadline_at, dispatch = deadline_of(ctx), ctx.dispatch
        if not step.options.terminate_on_timeout or deadline_at is None or dispatch is None:
            return nullcontext()
        return _terminating_at(ctx, dispatch, deadline_at)


@contextmanager
def _terminating_at(
    ctx: WorkflowContext, dispatch: DispatchView, deadline_at: float
) -> Iterator[None]:
    """Held while a step runs: at ``deadline_at``, the run's cancel, then Celery's revoke."""

    def stop() -> None:
        # The cancel first, so that its reason is the deadline, not the revoke that
        # stops the step (the sweeper leaves a run being cancelled to that cancel).
        try:
            ctx.store.cancel_run(ctx.run_id, DEADLINE_EXCEEDED, dispatch.dispatch_grace)
        except Exception:  # noqa: BLE001 - the sweeper's deadline pass cancels it anyway
            logger.warning("run %s: could not cancel it at its deadline", ctx.run_id)
        dispatch.terminate(ctx.run_id)

    timer = threading.Timer(max(0.0, deadline_at - time.time()), stop)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
