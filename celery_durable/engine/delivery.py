"""Running a delivered workflow task: claim the run, replay its body, settle the outcome.

The kernel of a delivery names no feature: how a run is claimed (a limiter's slot in the
claim), what else may claim it (a transactional start, a start by name), what comes
before the body (a schedule's slot argument, a saga's rollback, a limited run's slot)
and after it are the delivery hooks of the Runtime (``engine.hooks``), which
``wiring.py`` registers from each feature's module.

Example::

    execute(durable, definition, task.request)     # inside WorkflowTask.run_workflow
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import LeaseClock, WorkflowContext, activate, deactivate
from celery_durable.body.event_loop import Interrupted, run_body
from celery_durable.body.replay import stop_writing
from celery_durable.core import faults, serialization, tracing, validate
from celery_durable.core.logs import log_malformed, run_fields
from celery_durable.engine import shutdown, taskevents
from celery_durable.engine.hooks import Delivery, leave_body
from celery_durable.engine.liveness import take_over_from_gone_owner
from celery_durable.engine.settle import settle_stop_or_error, settle_success
from celery_durable.store import Claim, RunRecord, is_unreachable
from celery_durable.store.db.unusable import Unusable, unusable

if TYPE_CHECKING:
    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.workflow")

# Set on a transactional start's message: its row may become visible a moment after it.
TRANSACTIONAL_HEADER = "durable_transactional"


class ClaimUnavailable(Exception):  # noqa: N818 - internal signal, not an error of the run
    """Internal: the claim could not reach the database, or found it unusable (no tables
    yet: ``unusable``); the delivery is kept and delivered again later."""

    def __init__(self, text: str, unusable: Unusable | None = None) -> None:
        super().__init__(text)
        self.unusable = unusable


def request_header(request: Any, name: str) -> Any:
    headers = getattr(request, "headers", None) or {}
    return headers.get(name, getattr(request, name, None))


def execute(
    runtime: Runtime,
    definition: WorkflowDefinition,
    request: Any,
    time_limit: float | None = None,
    start_by_name: Callable[[], Exception | None] | None = None,
) -> Any:
    """Claim the run named by the Celery task id, replay its body, settle the outcome;
    ``time_limit``: the task's hard time limit (the message's own wins). A message sent
    by name (``start_by_name``) whose run doesn't exist stores it first."""
    hooks, config = runtime.hooks, runtime.config
    hard_deadline = shutdown.hard_deadline(request, time_limit, time.monotonic())
    run_id: str = request.id
    _check_run_id(runtime, definition, run_id)  # before the store is asked anything
    delivery = Delivery(runtime, definition, request, run_id, runtime.leases.owner, start_by_name)
    claim = delivery.claim = _claim(runtime, delivery)
    for claimed in hooks.claimed:
        claimed(delivery)
    ctx = delivery.ctx = _context(runtime, delivery, claim, hard_deadline)
    delivery.args, delivery.kwargs = serialization.loads(claim.args)
    runtime.leases.track(run_id, ctx.lease)
    try:
        undos = hooks.enter_body(delivery)  # a limited run's slot, a saga's rollback...
    except BaseException:
        runtime.leases.untrack(run_id)
        raise
    token = activate(ctx)
    finished = False
    try:
        try:
            value = definition.fn(*delivery.args, **delivery.kwargs)
            if definition.is_async:
                value = _run_async_body(ctx, value)
        finally:
            deactivate(token)
        if ctx.stopping is not None:
            # The body swallowed the stop (a bare except around a step): it still wins.
            raise ctx.stopping
        name = f"workflow {ctx.workflow_name}"
        limits = config.max_payload_bytes, config.max_payload_depth
        encoded = serialization.encode_value(name, value, *limits)
    except BaseException as raised:  # noqa: BLE001 - every exception is settled
        # Why the body was told to stop wins over what its finally blocks raised after.
        stop = ctx.stopping or raised
        for stopped in hooks.body_stopped:
            stopped(delivery, stop)
        return settle_stop_or_error(runtime, ctx, claim, stop)
    else:
        # Outside the try: a failed settle leaves the run to its lease, never to a retry.
        settle_success(runtime, ctx, encoded)
        finished = True
        return taskevents.finished(runtime.app, ctx, value)
    finally:
        runtime.leases.untrack(run_id)
        leave_body(undos, finished=finished)


def _check_run_id(runtime: Runtime, definition: WorkflowDefinition, run_id: str) -> None:
    problem = validate.id_problem(run_id)
    if problem is not None:
        # Not a run anyone could have started (they are checked at start): the store
        # can't even be asked about it.
        fields = run_fields(repr(run_id)[:255], definition.name)
        text = f"its task id (the run id) is invalid: {problem}"
        log_malformed(logger, f"{definition.name} workflow", run_id, text, extra=fields)
        raise taskevents.ended(runtime.app, run_id, None, f"malformed message: {text}")


def _run_async_body(ctx: WorkflowContext, body: Any) -> Any:
    """An async body on this thread's loop. Cancelling the run interrupts it at its await
    (the heartbeat finds the request): the run stops as at a write that finds it."""
    try:
        return run_body(body, ctx.lease)
    except Interrupted:
        stop_writing(ctx)


def _claim(runtime: Runtime, delivery: Delivery) -> Claim:
    """The claim (a feature's variant of it, or the plain one), then a gone owner's
    take-over and the features' fallbacks; the delivery ends if none claims the run."""
    hooks, run_id, owner = runtime.hooks, delivery.run_id, delivery.owner
    try:
        if not runtime.leases.prove_alive():
            raise ClaimUnavailable(f"the proof of life of {owner} is held by another session")
        claim = hooks.claim(delivery)()
        if claim is None:  # leased by another owner: did it die?
            claim = take_over_from_gone_owner(runtime, run_id, owner)
        claim = hooks.fall_back(delivery, claim)
    except Exception as exc:
        if is_unreachable(exc):
            raise ClaimUnavailable(str(exc)) from exc
        # Not migrated yet (or the database is missing): kept until someone acts.
        not_usable = unusable(exc, runtime.store.table_prefix)
        if not_usable is not None:
            raise ClaimUnavailable(str(exc), not_usable) from exc
        raise
    if claim is None:
        run = _log_unclaimed(runtime, delivery.definition, run_id)
        raise taskevents.unclaimed(runtime.app, run_id, run)
    return claim


def _context(
    runtime: Runtime, delivery: Delivery, claim: Claim, hard_deadline: float | None
) -> WorkflowContext:
    """The claimed run's context, built once (with the features' state the delivery
    holds), its history loaded: the claim is logged, traced and shown in Flower."""
    config, run_id = runtime.config, delivery.run_id
    history = runtime.store.load_steps(run_id) if claim.has_steps else {}
    ctx = WorkflowContext(
        store=runtime.store,
        run_id=run_id,
        workflow_name=delivery.definition.name,
        attempt=claim.attempts,
        fence=claim.fence,
        history=history,
        queue=claim.queue,
        parent_id=claim.parent_id,
        parent_idx=claim.parent_idx,
        dispatch=runtime.dispatch,
        lease=LeaseClock(config.lock_timeout),
        deferred_max_steps=config.deferred_max_steps,
        deferred_max_age=config.deferred_max_age,
        hard_deadline=hard_deadline,
        max_payload_bytes=config.max_payload_bytes,
        max_payload_depth=config.max_payload_depth,
        max_steps=config.max_steps,
        max_child_depth=config.max_child_depth,
        max_map_items=config.max_map_items,
        step_guards=tuple(runtime.hooks.step_guards),
        wings=delivery.wings,
    )
    faults.reach(faults.AFTER_CLAIM, **ctx.log_fields())
    logger.info(
        "workflow %s run %s claimed: attempt %d of %d, %d recorded step(s) to replay",
        ctx.workflow_name,
        run_id,
        claim.attempts,
        claim.max_attempts,
        len(history),
        extra=ctx.log_fields(0),
    )
    tracing.claimed(claim.attempts, len(history))
    taskevents.resumed(runtime.app, ctx)
    return ctx


def _log_unclaimed(
    runtime: Runtime, definition: WorkflowDefinition, run_id: str
) -> RunRecord | None:
    run = runtime.store.get_run(run_id)
    fields = run_fields(run_id, definition.name, run.attempts if run else None)
    if run is None:
        logger.warning(
            "workflow %s: no run %r in namespace %r; message dropped",
            definition.name,
            run_id,
            runtime.config.namespace,
            extra=fields,
        )
    else:
        logger.info(
            "workflow %s run %s not claimed (status %s, lease held or not ready); "
            "delivery acknowledged",
            definition.name,
            run_id,
            run.status,
            extra=fields,
        )
    return run
