"""Running a delivered workflow task: claim the run, replay its body, settle the outcome.

Example::

    execute(durable, definition, task.request)     # inside WorkflowTask.run_workflow
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_durable.body.context import (
    LeaseClock,
    WorkflowContext,
    activate,
    deactivate,
    first_step_limit,
)
from celery_durable.canvas import reports as canvas
from celery_durable.core import faults, serialization, tracing, validate
from celery_durable.core.logs import log_malformed, run_fields
from celery_durable.engine import shutdown, taskevents
from celery_durable.engine.liveness import take_over_from_gone_owner
from celery_durable.engine.settle import settle_stop_or_error, settle_success
from celery_durable.errors import ArgumentsRefused, LeaseLost, Suspended
from celery_durable.limiters import run_slots as limits
from celery_durable.limiters.limiter import give_back_kept_slot
from celery_durable.sagas import rollback
from celery_durable.store import Claim, OwedReport, RunRecord, Store, is_unreachable
from celery_durable.store.db.unusable import Unusable, unusable

if TYPE_CHECKING:
    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.workflow")

TRANSACTIONAL_HEADER = "durable_transactional"
# How long a worker waits for a transactional start's row to become visible: the message
# is published from the commit hook, a moment before the COMMIT reaches the server.
_TRANSACTIONAL_VISIBILITY_WAIT = 2.0


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
    start_by_name: Callable[[], ArgumentsRefused | None] | None = None,
) -> Any:
    """Claim the run named by the Celery task id, replay its body, settle the outcome;
    ``time_limit``: the task's hard time limit (the message's own wins). A message sent
    by name (``start_by_name``) whose run doesn't exist stores it first."""
    store, config = runtime.store, runtime.config
    hard_deadline = shutdown.hard_deadline(request, time_limit, time.monotonic())
    run_id: str = request.id
    problem = validate.id_problem(run_id)
    if problem is not None:
        # Not a run anyone could have started (they are checked at start): the store
        # can't even be asked about it.
        fields = run_fields(repr(run_id)[:255], definition.name)
        text = f"its task id (the workflow id) is invalid: {problem}"
        log_malformed(logger, f"{definition.name} workflow", run_id, text, extra=fields)
        raise taskevents.ended(runtime.app, run_id, None, f"malformed message: {text}")
    owner = runtime.leases.owner
    try:
        if not runtime.leases.prove_alive():
            raise ClaimUnavailable(f"the proof of life of {owner} is held by another session")
        # A limited run's claim reads its slot too: no read of its own before the body.
        slot_of = None if definition.limiter is None else definition.limiter.limit
        # A first step behind a limiter: the claim takes its slot, no take before it.
        first = None if slot_of is not None else first_step_limit(definition.name)
        if first is None:
            claim = store.claim_run(
                run_id, owner, config.lock_timeout, config.max_recoveries, slot_of=slot_of
            )
        else:
            claim = store.claim_run_taking_slot(
                run_id, owner, config.lock_timeout, config.max_recoveries, first, "", 0
            )
        if claim is None:  # leased by another owner: did it die?
            claim = take_over_from_gone_owner(runtime, run_id, owner)
        if claim is None and request_header(request, TRANSACTIONAL_HEADER):
            claim = _claim_when_visible(
                store, run_id, owner, config.lock_timeout, config.max_recoveries
            )
        refused = None
        if claim is None and start_by_name is not None:
            refused = start_by_name()
            claim = store.claim_run(run_id, owner, config.lock_timeout, config.max_recoveries)
    except Exception as exc:
        if is_unreachable(exc):
            raise ClaimUnavailable(str(exc)) from exc
        # Not migrated yet (or the database is missing): kept until someone acts.
        not_usable = unusable(exc, store.table_prefix)
        if not_usable is not None:
            raise ClaimUnavailable(str(exc), not_usable) from exc
        raise
    if claim is None:
        run = _log_unclaimed(runtime, definition, run_id)
        raise taskevents.unclaimed(runtime.app, run_id, run)
    if refused is not None:
        _settle_refused(runtime, definition, run_id, claim, refused)
    history = store.load_steps(run_id) if claim.has_steps else {}
    ctx = WorkflowContext(
        store=store,
        workflow_id=run_id,
        workflow_name=definition.name,
        attempt=claim.attempts,
        fence=claim.fence,
        history=history,
        queue=claim.queue,
        parent_id=claim.parent_id,
        parent_idx=claim.parent_idx,
        dispatcher=runtime.dispatch,
        lease=LeaseClock(config.lock_timeout),
        deferred_max_steps=config.deferred_max_steps,
        deferred_max_age=config.deferred_max_age,
        hard_deadline=hard_deadline,
        max_payload_bytes=config.max_payload_bytes,
        max_payload_depth=config.max_payload_depth,
        max_steps=config.max_steps,
        max_child_depth=config.max_child_depth,
        max_map_items=config.max_map_items,
    )
    faults.reach(faults.AFTER_CLAIM, **ctx.log_fields())
    logger.info(
        "workflow %s run %s claimed: attempt %d of %d, %d recorded step(s) to replay",
        definition.name,
        run_id,
        claim.attempts,
        claim.max_attempts,
        len(history),
        extra=ctx.log_fields(0),
    )
    tracing.claimed(claim.attempts, len(history))
    taskevents.resumed(runtime.app, ctx)
    if claim.step_slot_taken and first is not None:
        ctx.kept_slot, ctx.kept_slot_waited = (first, "", 0), claim.step_slot_waited
    ctx.canvas = claim.canvas
    ctx.priority = claim.priority
    ctx.deadline_at = claim.deadline_at
    if claim.canvas is not None:
        canvas.report_started(runtime, ctx)
    args, kwargs = serialization.loads(claim.args)
    if definition.name in runtime.slot_workflows:
        kwargs = given_slot(kwargs)
    runtime.leases.track(run_id, ctx.lease)
    ctx.compensable = claim.compensable
    if rollback.resumable(ctx, claim):  # a saga cancelled while idle, or died rolling back
        try:
            status = rollback.resume(runtime, ctx)
        finally:
            runtime.leases.untrack(run_id)
        # Never a SUCCESS in Flower: the delivery ended a rollback.
        line = taskevents.ctx_line(ctx)
        if status == "CANCELLED":
            raise taskevents.ended(runtime.app, run_id, taskevents.CANCELLED, f"rolled back {line}")
        if status == "FAILED":
            taskevents.emit(runtime.app, run_id, taskevents.FAILING, result=f"rolled back {line}")
            raise taskevents.RunFailed(f"failed, rolled back {line}")
        raise taskevents.ended(runtime.app, run_id, None, "lease lost during the rollback")
    try:
        slot = limits.take_run_slot(runtime, definition, ctx, claim, args, kwargs)
    except BaseException:
        runtime.leases.untrack(run_id)
        raise
    token = activate(ctx)
    finished = False
    try:
        try:
            value = definition.fn(*args, **kwargs)
        finally:
            deactivate(token)
        if ctx.stopping is not None:
            # The body swallowed the stop (a bare except around a step): it still wins.
            raise ctx.stopping
        encoded = serialization.encode_value(
            f"workflow {ctx.workflow_name}",
            value,
            config.max_payload_bytes,
            config.max_payload_depth,
        )
    except BaseException as raised:  # noqa: BLE001 - every exception is settled
        # Why the body was told to stop wins over what its finally blocks raised after.
        stop = ctx.stopping or raised
        if ctx.kept_slot is not None and not isinstance(stop, (Suspended, LeaseLost)):
            _give_back_kept_slot(ctx)
        return settle_stop_or_error(runtime, ctx, claim, stop)
    else:
        # Outside the try: a failed settle leaves the run to its lease, never to a retry.
        settle_success(runtime, ctx, encoded)
        finished = True
        return taskevents.finished(runtime.app, ctx, value)
    finally:
        runtime.leases.untrack(run_id)
        limits.give_run_slot(runtime, definition, run_id, slot, finished)


def _give_back_kept_slot(ctx: WorkflowContext) -> None:
    """A slot kept for a step the body never reached, as it failed (or continued as
    new): a retry's backoff would hold it (a waiting run frees it without a write, and a
    lost lease is the new owner's). A store that fails here leaves it to the lease."""
    try:
        give_back_kept_slot(ctx)
    except BaseException:  # noqa: BLE001 - the body's own outcome is what settles
        logger.warning("run %s: its kept slot is left to its lease", ctx.workflow_id)


def _settle_refused(
    runtime: Runtime,
    definition: WorkflowDefinition,
    run_id: str,
    claim: Claim,
    refused: ArgumentsRefused,
) -> None:
    """A run sent by name with arguments the workflow can't take: stored FAILED with the
    error naming them (never dropped), reported like any failure; Celery's FAILURE."""
    error = serialization.encode_error(refused, step=None)
    status = runtime.store.settle_run(run_id, claim.fence, "FAILED", error=error)
    logger.error("%s", refused, extra=run_fields(run_id, definition.name, claim.attempts))
    if status == "FAILED" and claim.canvas is not None:
        owed = OwedReport(run_id, definition.name, status, "", None, error, None, claim.canvas)
        canvas.report_settled(runtime, owed)
    raise refused


def _claim_when_visible(
    store: Store, run_id: str, owner: str, lease: float, max_recoveries: int
) -> Claim | None:
    """A transactional start's message can arrive a moment before its COMMIT: look again
    briefly. The row's visibility is read before each claim, so a COMMIT that lands
    between the two can't end the wait with the run unclaimed."""
    deadline = time.monotonic() + _TRANSACTIONAL_VISIBILITY_WAIT
    while True:
        faults.reach(faults.AFTER_CLAIM_MISSED, workflow_id=run_id)
        visible = store.get_status(run_id) is not None
        claim = store.claim_run(run_id, owner, lease, max_recoveries)
        if claim is not None or visible or time.monotonic() > deadline:
            return claim
        time.sleep(0.02)


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


def given_slot(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A schedule's run keeps its slot as ISO 8601 text (arguments are JSON); its body
    gets it as the timezone-aware datetime it is."""
    slot = kwargs.get("scheduled_for")
    if not isinstance(slot, str) or not slot.endswith("]") or "[" not in slot:
        return kwargs
    moment, _, tz = slot[:-1].partition("[")
    try:
        given = dt.datetime.fromisoformat(moment).astimezone(ZoneInfo(tz))
    except (ValueError, ZoneInfoNotFoundError):
        return kwargs  # not a slot a schedule wrote: the body gets what it was given
    return {**kwargs, "scheduled_for": given}
