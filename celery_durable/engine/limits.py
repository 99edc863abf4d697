"""A limited workflow's slot (``@durable.workflow(limiter=...)``, ``concurrency=``): taken
when a run starts (or it waits, PENDING with no message), held while its body runs, given
back when the delivery ends; and the hand-off of every limiter's free slots to its waiters,
from the sweeper.

Example::

    key = take_run_slot(runtime, definition, ctx, args, kwargs)   # in execute()
    give_run_slot(runtime, definition, ctx.workflow_id, key)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import WorkflowContext
from celery_durable.core.logs import run_fields
from celery_durable.engine import taskevents
from celery_durable.engine.publish import publish_woken
from celery_durable.store import Outcome
from celery_durable.store.limiters import WHOLE_RUN

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime, WorkflowDefinition

logger = logging.getLogger("celery_durable.workflow")


def park_new_run(
    runtime: Runtime,
    definition: WorkflowDefinition,
    run_id: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    priority: int,
) -> bool:
    """A run just started: take its slot now (True: publish it), or leave it PENDING with
    no message until a slot is handed to it (False)."""
    limiter = definition.limiter
    if limiter is None:
        return True
    key = limiter.key_of(f"workflow {definition.name}", args, kwargs)
    outcome = runtime.store.acquire_slot(limiter.limit, key, run_id, priority=priority)
    if outcome is Outcome.RECORDED:
        return True
    logger.info(
        "workflow %s run %s waits for limiter %r (key %r): no free slot",
        definition.name,
        run_id,
        limiter.name,
        key,
        extra=run_fields(run_id, definition.name),
    )
    return False


def take_run_slot(
    runtime: Runtime,
    definition: WorkflowDefinition,
    ctx: WorkflowContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str | None:
    """Before a limited run's body: its slot (the key it holds), or the delivery ends with
    the run PENDING and no message, its lease and attempt given back."""
    limiter = definition.limiter
    if limiter is None:
        return None
    key = limiter.key_of(f"workflow {definition.name}", args, kwargs)
    if runtime.store.holds_slot(limiter.limit, ctx.workflow_id):
        return key  # taken at its start, or handed to it: no lock, no commit
    outcome = runtime.store.acquire_slot(
        limiter.limit, key, ctx.workflow_id, priority=ctx.priority, fence=ctx.fence, park="PENDING"
    )
    if outcome is Outcome.RECORDED:
        return key
    text = f"waiting for limiter {limiter.name!r} (key {key!r}) {taskevents.ctx_line(ctx)}"
    if outcome is Outcome.SUSPENDED:
        logger.info("workflow %s run %s is %s", definition.name, ctx.workflow_id, text)
        raise taskevents.ended(runtime.app, ctx.workflow_id, taskevents.SCHEDULED, text)
    raise taskevents.ended(runtime.app, ctx.workflow_id, None, f"not run: {outcome.value}")


def give_run_slot(
    runtime: Runtime, definition: WorkflowDefinition, run_id: str, key: str | None
) -> None:
    """The delivery ended (settled, suspended, retrying): the slot goes to the next run."""
    limiter = definition.limiter
    if limiter is None or key is None:
        return
    grace = runtime.config.dispatch_grace
    try:
        woken = runtime.store.release_slot(limiter.limit, key, run_id, WHOLE_RUN, grace)
    except Exception:  # noqa: BLE001 - the slot is free anyway once the run isn't live
        logger.warning(
            "run %s: could not give its slot of %r back", run_id, limiter.name, exc_info=True
        )
        return
    for run in woken:
        publish_woken(runtime, run, f"limiter {limiter.name!r} handed it a slot")


def hand_off_slots(runtime: Runtime) -> int:
    """The sweeper's pass: every limiter's free slots and refilled tokens go to its next
    waiters (a dead holder's slot is free once its lease is out); returns the runs woken."""
    grace = runtime.config.dispatch_grace
    woken = 0
    for limiter in list(runtime.limiters.values()):
        for run in runtime.store.hand_off(limiter.limit, grace):
            publish_woken(runtime, run, f"limiter {limiter.name!r} handed it a slot")
            woken += 1
    return woken
