"""Rolling a saga back when its run fails for good or is cancelled, then settling it.

The rollback starts by recording a marker step (``celery_durable.rollback``) that keeps the
status and error the run will end with; then each compensation is a recorded step (see
``compensation``). A worker that claims a run whose history holds the marker (the last
one died mid-rollback), or a cancelled saga handed back to roll back, goes straight to
the rollback without running the body.

Example::

    if rollback.needed(ctx):                               # in settle, failing for good
        status = rollback.settle(durable, ctx, "FAILED", error, failed_step)

``roll_back_instead`` (before the body) and ``Saga`` (a settle listener: a saga rolls
back before it ends) are the delivery hooks that wiring.py registers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from celery_durable.body.context import WorkflowContext
from celery_durable.core import serialization
from celery_durable.engine import taskevents
from celery_durable.engine.finish import finish
from celery_durable.engine.runtime_view import SettleListener
from celery_durable.errors import LeaseLost, StoreUnavailable
from celery_durable.sagas.compensation import (
    ROLLBACK_STEP,
    WING,
    Compensation,
    is_compensable,
    pending_compensations,
    run_compensations,
    write_fenced,
)
from celery_durable.sagas.store import SAGAS
from celery_durable.store import Claim, StepRecord

if TYPE_CHECKING:
    from celery_durable.engine.hooks import Delivery
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.workflow")

COMPENSATED = "compensated"
COMPENSATION_FAILED = "compensation failed"


def _marker(ctx: WorkflowContext) -> StepRecord | None:
    return next((r for r in ctx.history.values() if r.name == ROLLBACK_STEP), None)


def needed(ctx: WorkflowContext) -> bool:
    """Whether the run has compensations left to run (or a rollback to finish)."""
    if _marker(ctx) is not None:
        return True
    if not is_compensable(ctx) and not ctx.history:
        return False
    ctx.next_index = max(ctx.next_index, max(ctx.history, default=-1) + 1)
    return bool(pending_compensations(ctx))


def resumable(ctx: WorkflowContext, claim: Claim) -> bool:
    """A claimed run that must roll back instead of running its body."""
    return (claim.cancel_requested and claim.compensable) or _marker(ctx) is not None


def resume(runtime: RuntimeView, ctx: WorkflowContext) -> str | None:
    """Finish (or start, for a cancelled saga) the rollback of a claimed run, and settle;
    the final status (None: the lease was lost)."""
    status = settle(runtime, ctx, "CANCELLED", None, None)
    logger.info(
        "workflow %s run %s rolled back: %s",
        ctx.workflow_name,
        ctx.run_id,
        status,
        extra=ctx.log_fields(),
    )
    return status


def roll_back_instead(delivery: Delivery) -> None:
    """Before the body: a saga cancelled while idle, or that died rolling back, rolls
    back instead, and the delivery ends; never a SUCCESS in Flower. A compensable run
    (``claim.compensable``) is noted so in its context first."""
    runtime, ctx, claim = delivery.runtime, delivery.ctx, delivery.claim
    if claim is not None and claim.compensable:
        ctx.wings[WING] = True
    if claim is None or not resumable(ctx, claim):
        return
    status = resume(runtime, ctx)
    line, run_id = taskevents.ctx_line(ctx), ctx.run_id
    if status == "CANCELLED":
        raise taskevents.ended(runtime.app, run_id, taskevents.CANCELLED, f"rolled back {line}")
    if status == "FAILED":
        taskevents.emit(runtime.app, run_id, taskevents.FAILING, result=f"rolled back {line}")
        raise taskevents.RunFailed(f"failed, rolled back {line}")
    raise taskevents.ended(runtime.app, run_id, None, "lease lost during the rollback")


def settle(
    runtime: RuntimeView,
    ctx: WorkflowContext,
    status: str,
    error: str | None,
    failed: StepRecord | None,
) -> str | None:
    """Record the marker, run the compensations, settle the run; the final status (None
    when the lease was lost). A database outage leaves the run to its lease: the worker
    that recovers it resumes the rollback."""
    try:
        if failed is not None:
            write_fenced(ctx, failed)
        marker = _marker(ctx)
        if marker is None:
            ctx.next_index = max(ctx.next_index, max(ctx.history, default=-1) + 1)
            ending = serialization.dumps({"status": status, "error": error})
            marker = StepRecord(
                ctx.take_index(bounded=False), ROLLBACK_STEP, "ok", "[]", ending, None, 0.0
            )
            write_fenced(ctx, marker)
        else:
            recorded = serialization.loads(marker.output or "{}")
            status, error = recorded.get("status", status), recorded.get("error", error)
        ctx.next_index = marker.idx + 1
        run_compensations(ctx)
        ran = [c for c in map(Compensation.of, ctx.history.values()) if c is not None]
        failures = [c for c in ran if c.status == "error"]
        if status == "FAILED" and error is not None and failures:
            decoded = serialization.decode_error(error)
            decoded["compensation_errors"] = [f"{c.step}: {c.error}" for c in failures]
            decoded["message"] += f" (and {len(failures)} compensation(s) failed)"
            error = serialization.dumps(decoded)
        outcome = COMPENSATION_FAILED if failures else COMPENSATED
        if not SAGAS.of(runtime.store).set_compensation(ctx.run_id, ctx.fence, outcome):
            return None
    except LeaseLost:
        return None
    except StoreUnavailable as exc:
        raise exc.__cause__ or RuntimeError(str(exc)) from None
    return finish(runtime, ctx, status, error=error)


def finish_or_roll_back(
    runtime: RuntimeView,
    ctx: WorkflowContext,
    status: str,
    error: str | None,
    step: StepRecord | None,
) -> str | None:
    """Settle a run that fails for good or is cancelled; a saga rolls back first."""
    if needed(ctx):
        return settle(runtime, ctx, status, error, step)
    return finish(runtime, ctx, status, error=error, step=step)


class Saga(SettleListener):
    """The settle listener (wiring.py) of sagas: a run with compensations to run rolls
    back before it ends."""

    def finishing(
        self,
        runtime: RuntimeView,
        ctx: WorkflowContext,
        status: str,
        error: str | None,
        step: StepRecord | None,
    ) -> Callable[[], str | None] | None:
        if not needed(ctx):
            return None
        return lambda: settle(runtime, ctx, status, error, step)
