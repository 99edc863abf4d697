"""Item tasks: each step's own Celery task, which runs the items of fan-outs (``cd.map``,
``step.start``, routed steps) outside the workflow body; cancellation (their publishing is
in ``celery_durable.engine.publish``).

Every step is registered as a Celery task under its own name (Flower shows items under
it), with ``acks_late`` and ``reject_on_worker_lost``. A message carries only (namespace,
run id, step index, item); its task id is derived from them, so a re-dispatch is the same
task. The task claims the item (a token and a lease, renewed by the process's heartbeat),
runs the step under the step's own retry policy, and records the outcome once: the first
writer wins, and the transaction that records the last awaited item wakes the parent.

Example::

    @durable.step(queue="gpu", max_attempts=3)
    def render(page: int) -> str: ...          # the Celery task "myapp.render"

    images = cd.map(render, range(100))        # 100 messages on "gpu", results in order
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from celery import Celery, Task
from celery.exceptions import TaskRevokedError
from kombu.utils.encoding import safe_repr

from celery_durable.core import faults, serialization, tracing, validate
from celery_durable.core.logs import log_malformed, run_fields
from celery_durable.engine import shutdown, taskevents
from celery_durable.engine.apps import runtime_for
from celery_durable.engine.cancel import REVOKED
from celery_durable.engine.publish import publish_woken
from celery_durable.errors import DuplicateRegistration, NotSerialisable, PermanentError
from celery_durable.fanout.batch_tasks import execute_batch, log_item_retry, may_run_open
from celery_durable.fanout.open_item import CLAIM, RUN, OpenItem
from celery_durable.fanout.store_area import FANOUT, FanoutArea
from celery_durable.store import ItemClaim, ItemWrite, Outcome

if TYPE_CHECKING:
    from celery_durable.body.step import Step
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.items")

# The reason a revoked item (or run) records.


def revoke_item(runtime: RuntimeView, task_id: str) -> bool:
    """``celery control revoke`` of an item's task id (``<run id>:<step>:<item>``), or of a
    batch's (``<run id>:<step>:<first>-<last>``, each of its unsettled items): settle the
    item "revoked" in the store, so that no delivery of it runs again (Celery's own revoked
    set is in memory, per worker), and publish the parent it woke. False when the id names
    no unsettled item (a run's id, a settled item, a derived uuid)."""
    parts = task_id.rsplit(":", 2)
    span = parts[-1].split("-", 1)
    numbers = [parts[1] if len(parts) == 3 else "", *span]
    if len(parts) != 3 or not parts[0] or not all(n.isascii() and n.isdecimal() for n in numbers):
        return False
    run_id, idx, first, last = parts[0], int(parts[1]), int(span[0]), int(span[-1])
    error = serialization.encode_error(TaskRevokedError(REVOKED))
    revoked = False
    for item in range(first, last + 1):
        written = FANOUT.of(runtime.store).revoke_item(
            run_id, idx, item, error, runtime.config.dispatch_grace
        )
        if written is None:
            continue
        revoked = True
        logger.warning(
            "item %d of step %d of run %s revoked (task %s): recorded as failed with "
            "TaskRevokedError; no delivery of it runs again",
            item,
            idx,
            run_id,
            task_id,
            extra={**run_fields(run_id, step_index=idx), "item": item},
        )
        publish_woken(runtime, written.woken, f"item {item} of step {idx} was revoked")
    return revoked


class ItemTask(Task):  # type: ignore[misc]
    """Base class of every step's Celery task (the items of fan-outs)."""

    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True
    typing = False  # a malformed message is logged, not a TypeError
    # Reports each delivery to Flower truthfully (RETRY while backing off, FAILURE for an
    # item that failed for good; see taskevents).
    Request = "celery_durable.engine.taskevents:WorkflowRequest"


def register_item_task(app: Celery, step: Step[Any, Any]) -> None:
    """Register ``step``'s Celery task under the step's name, once per app: the task
    finds the Durable by the namespace its message names."""
    existing = app._tasks.get(step.name)  # noqa: SLF001 - .tasks would finalize the app
    if existing is not None:
        if isinstance(existing, ItemTask):
            return  # another Durable of this app has a step of the same name
        raise DuplicateRegistration(
            f"a Celery task named {step.name!r} already exists; the step can't reuse its "
            "name (pass name= to the step)"
        )

    def run_item(task: ItemTask, *args: Any, **kwargs: Any) -> Any:
        runtime = _item_target(app, task, args, kwargs)
        if runtime is None:
            return None
        _, run_id, idx, item, *batch = args
        with tracing.item(task.name, task.request, run_id, idx, item):
            if batch and batch[0] > 1:
                return execute_batch(runtime, task, run_id, idx, item, batch[0])
            return execute_item(runtime, task, run_id, idx, item)

    run_item.__name__ = getattr(step.fn, "__name__", "run_item")
    run_item.__qualname__ = getattr(step.fn, "__qualname__", "run_item")
    run_item.__module__ = step.fn.__module__
    run_item.__doc__ = step.fn.__doc__
    app.task(name=step.name, base=ItemTask, bind=True, shared=False, lazy=False)(run_item)


_MAX_INDEX = 2**31 - 1  # the step and item columns are Postgres integers


def _item_target(app: Celery, task: Task, args: Any, kwargs: Any) -> RuntimeView | None:
    """The Durable an item message is for; None (refused by name, logged once) when its
    arguments don't fit, can't be a run id and indexes, or name an unknown namespace."""
    expected = "(namespace, run id, step index, item number[, batch's item count])"
    problem = validate.arguments_problem(args, kwargs, expected, range(4, 6))
    if problem is None:
        namespace, run_id, idx, item, *batch = args
        id_problem = validate.id_problem(run_id)
        if id_problem is not None:
            problem = f"the run id is invalid: {id_problem}"
        elif any(type(n) is not int or not 0 <= n <= _MAX_INDEX for n in (idx, item, *batch)):
            problem = (
                f"the step index {idx!r}, item {item!r} and count {batch!r} must be integers "
                f"0 to {_MAX_INDEX}"
            )
        elif not isinstance(namespace, str):
            problem = f"the namespace is {type(namespace).__name__}, not a string"
        else:
            try:
                return runtime_for(app, namespace)
            except LookupError:
                problem = f"no Durable serves the namespace {namespace!r} here"
    fields = run_fields(repr(args[1])[:255] if len(args) > 1 else None)
    log_malformed(logger, f"{task.name} item", task.request.id, problem, extra=fields)
    return None


def execute_item(runtime: RuntimeView, task: Task, run_id: str, idx: int, item: int) -> Any:
    """Run the item's step under the step's retry policy and record the outcome: a first
    delivery in one open transaction (``store.fanout.open_item``), anything else after a
    claim. Returns the step's value; an item that failed for good raises its exception
    (Celery's FAILURE), one that did not run or waits out a backoff raises DeliveryEnded."""
    store = FANOUT.of(runtime.store)
    deadline = shutdown.hard_deadline(task.request, task.time_limit, time.monotonic())
    fields = {**run_fields(run_id, step_index=idx), "item": item, "step": task.name}
    opened = store.open_item(run_id, idx, item) if may_run_open(task) else None
    verdict = CLAIM if opened is None else opened.verdict
    if opened is not None and opened.claim is not None and verdict == RUN:
        _claimed(task, opened.claim, fields)
        runtime.leases.track_open_item(opened)
        try:
            value = _run_claimed(runtime, task, opened, opened.claim, fields)
        except BaseException as exc:
            opened.abandon()  # a no-op once the outcome is written
            if opened.owner is not None:  # the heartbeat traded the transaction for a lease
                _give_back_if_stopped(runtime, task, (*opened.key, opened.owner), exc, deadline)
            raise
        finally:
            runtime.leases.untrack_open_item(opened)
        return _finished(runtime, task, value, fields)
    if verdict == CLAIM:
        return _claim_and_run(runtime, task, run_id, idx, item, fields, deadline)
    raise _not_claimed(runtime, task, fields)


def _line(task: Task, fields: dict[str, Any]) -> str:
    """The item's line for Flower: ``[workflow=R attempt=N step=I (NAME) item=K]``."""
    return taskevents.run_line(
        fields["run_id"],
        fields["attempt"] or 0,
        fields["step_index"],
        task.name,
        item=fields["item"],
    )


def _not_claimed(runtime: RuntimeView, task: Task, fields: dict[str, Any]) -> BaseException:
    logger.info(
        "item %d of step %d (%s) of run %s not claimed (recorded already, running "
        "elsewhere or waiting out a retry backoff); delivery acknowledged",
        fields["item"],
        fields["step_index"],
        task.name,
        fields["run_id"],
        extra=fields,
    )
    # No event: Flower keeps what the delivery that runs (or ran) the item reported.
    text = f"item not claimed {_line(task, fields)}"
    return taskevents.ended(runtime.app, task.request.id, None, text)


def _claimed(task: Task, claim: ItemClaim, fields: dict[str, Any]) -> None:
    fields["attempt"] = claim.attempts
    logger.debug(
        "item %d of step %d (%s) of run %s claimed: attempt %d",
        fields["item"],
        fields["step_index"],
        task.name,
        fields["run_id"],
        claim.attempts,
        extra=fields,
    )


def _finished(runtime: RuntimeView, task: Task, value: Any, fields: dict[str, Any]) -> Any:
    return taskevents.finished_task(runtime.app, task.request.id, value, _line(task, fields))


def _claim_and_run(
    runtime: RuntimeView,
    task: Task,
    run_id: str,
    idx: int,
    item: int,
    fields: dict[str, Any],
    deadline: float | None,
) -> Any:
    store, config = FANOUT.of(runtime.store), runtime.config
    owner = runtime.leases.item_token()
    claim = store.claim_item(run_id, idx, item, owner, config.lock_timeout, config.max_recoveries)
    if claim is None:
        raise _not_claimed(runtime, task, fields)
    _claimed(task, claim, fields)
    if claim.status == "cancelled":
        logger.info(
            "item %d of step %d (%s) of run %s not run: the run is cancelled or over",
            item,
            idx,
            task.name,
            run_id,
            extra=fields,
        )
        text = f"cancelled with its run {_line(task, fields)}"
        raise taskevents.ended(runtime.app, task.request.id, taskevents.CANCELLED, text)
    held = (run_id, idx, item, owner)
    runtime.leases.track_item(held)
    try:
        value = _run_claimed(runtime, task, _Claimed(store, held), claim, fields)
        return _finished(runtime, task, value, fields)
    except BaseException as exc:
        _give_back_if_stopped(runtime, task, held, exc, deadline)
        raise
    finally:
        runtime.leases.untrack_item(held)


def _give_back_if_stopped(
    runtime: RuntimeView,
    task: Task,
    held: tuple[str, int, int, str],
    exc: BaseException,
    deadline: float | None,
) -> None:
    """The item's process is being stopped: give the item back, due at once; not a failed
    attempt."""
    stopped_by = shutdown.interruption(exc, deadline)
    if stopped_by is not None and FANOUT.of(runtime.store).release_items([held]):
        run_id, idx, item, _ = held
        logger.warning(
            "item %d of step %d (%s) of run %s interrupted by %s; lease given back",
            item,
            idx,
            task.name,
            run_id,
            stopped_by,
            extra={**run_fields(run_id, step_index=idx), "item": item, "step": task.name},
        )


class _Claimed:
    """Where a claimed item records its outcome: fenced by its claim token."""

    def __init__(self, store: FanoutArea, held: tuple[str, int, int, str]) -> None:
        self.store, self.held = store, held

    def settle(self, status: str, output: str | None, error: str | None, grace: float) -> ItemWrite:
        run_id, idx, item, owner = self.held
        return self.store.settle_item(run_id, idx, item, owner, status, output, error, grace)

    def retry(self, delay: float, error: str) -> bool:
        run_id, idx, item, owner = self.held
        return self.store.retry_item(run_id, idx, item, owner, delay, error)

    def count_attempt(self, error: str) -> bool:
        run_id, idx, item, owner = self.held
        return self.store.count_item_attempt(run_id, idx, item, owner, error)


def _run_claimed(
    runtime: RuntimeView,
    task: Task,
    writer: _Claimed | OpenItem,
    claim: ItemClaim,
    fields: dict[str, Any],
) -> Any:
    """Run the claimed item and record its outcome; returns the step's value, raises the
    step's exception when the item failed for good."""
    run_id, idx, item = fields["run_id"], fields["step_index"], fields["item"]
    config = runtime.config
    step = runtime.steps.get(claim.name)
    attempt = claim.attempts
    status, output, error = "error", None, None
    value: Any = None
    failure: Exception | None = None
    if step is None:
        failure = PermanentError(f"no step {claim.name!r} is registered in this worker")
        error = serialization.encode_error(failure)
    else:
        args, kwargs = serialization.loads(claim.input)
        while True:
            try:
                value = step.fn(*args, **kwargs)
                output = serialization.encode_value(
                    f"step {step.name}",
                    value,
                    runtime.config.max_payload_bytes,
                    runtime.config.max_payload_depth,
                )
                status = "ok"
                break
            except Exception as exc:  # noqa: BLE001 - every failure is recorded or retried
                retry = attempt < step.options.max_attempts and step.retryable(exc)
                if not retry or isinstance(exc, NotSerialisable):
                    error, failure = serialization.encode_error(exc), exc
                    break
                delay = step.delay_after(attempt)
                log_item_retry(step, run_id, idx, item, attempt, delay, exc, fields)
                if task.request.is_eager and isinstance(writer, _Claimed):
                    # Eager mode has no sweeper to publish it again: retry in-process,
                    # counting the attempt on the item's row as a worker's retry would.
                    time.sleep(delay)
                    writer.count_attempt(serialization.encode_error(exc))
                    attempt += 1
                    continue
                # The backoff waits in the database; the sweeper publishes it when due.
                writer.retry(delay, serialization.encode_error(exc))
                line = taskevents.run_line(run_id, attempt, idx, step.name, item=item)
                text = f"retry attempt {attempt + 1} in {delay:.2f}s {line}"
                raise taskevents.ended(
                    runtime.app, task.request.id, taskevents.RETRIED, text, exception=safe_repr(exc)
                ) from exc
    written = writer.settle(status, output, error, config.dispatch_grace)
    if written.outcome is not Outcome.RECORDED:
        logger.warning(
            "item %d of step %d of run %s ran, but its outcome was not recorded: another "
            "delivery recorded it first (its lease had expired), or it was revoked",
            item,
            idx,
            run_id,
            extra=fields,
        )
        text = (
            "ran, but another delivery recorded the item first (or its run was cancelled, "
            "or it was revoked)"
        )
        raise taskevents.ended(runtime.app, task.request.id, None, text)
    logger.debug(
        "item %d of step %d (%s) of run %s recorded %s%s",
        item,
        idx,
        claim.name,
        run_id,
        status,
        "; its run is woken" if written.woken is not None else "",
        extra=fields,
    )
    faults.reach(faults.AFTER_RECORD_ITEM, **fields)
    publish_woken(runtime, written.woken, f"item {item} of step {idx} settled")
    if failure is not None:
        raise failure  # recorded: Celery's FAILURE shows it (the parent gets the record)
    return value
