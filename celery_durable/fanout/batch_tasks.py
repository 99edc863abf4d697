"""Batch tasks: ``cd.map(step, items, batch_size=K)`` sends one Celery task per K
consecutive items, and the item task (``celery_durable.fanout.item_tasks``) runs such a
message here: its fifth argument is the batch's item count.

A first delivery of at most 64 items runs in one open transaction that holds each item's
advisory lock (``fanout/open_batch.py``), so each item row is written once, by its
record; anything else claims the batch's items in one statement under one claim token (a
lease that the process's heartbeat renews). Either way the task runs them in order
under the step's own retry policy, and records what it ran in one transaction at the
end, or every lease beat
(``durable_lock_timeout / 3``) while a batch runs long, so that a crash loses at most a
beat of work: the items it had recorded never run again, the others are taken over once
their lease runs out, each as an item task of its own. Every ``durable_poll_interval``
between items it reads what it still holds, so a revoked item or a cancelled run's items
not yet run never run.

Example::

    images = cd.map(render, range(1_000), batch_size=50)   # 20 messages, results in order
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from celery import Task

from celery_durable.core import faults, serialization
from celery_durable.core.logs import run_fields
from celery_durable.engine import shutdown, taskevents
from celery_durable.engine.publish import publish_woken
from celery_durable.errors import NotSerialisable, PermanentError
from celery_durable.fanout.open_batch import OpenBatch
from celery_durable.fanout.store_area import FANOUT
from celery_durable.store import ItemClaim, Settled

if TYPE_CHECKING:
    from celery_durable.body.step import Step
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.items")


def may_run_open(task: Task) -> bool:
    """Whether this delivery may run in an open transaction: a worker's first delivery
    (eager mode and redeliveries take the claimed path, which counts attempts)."""
    redelivered = bool((task.request.delivery_info or {}).get("redelivered"))
    return not task.request.is_eager and not redelivered


def execute_batch(
    runtime: RuntimeView, task: Task, run_id: str, idx: int, first: int, count: int
) -> Any:
    """Claim, run and record the items ``first`` to ``first + count - 1`` of step ``idx``:
    a first delivery in one open transaction (``store.fanout.open_batch``), anything else
    after a claim. Raises DeliveryEnded when none could be claimed (recorded, running
    elsewhere, waiting out a backoff); failed items are recorded, not raised (their parent
    gets the record)."""
    config, store = runtime.config, FANOUT.of(runtime.store)
    fields = {**run_fields(run_id, step_index=idx), "item": first, "step": task.name}
    deadline = shutdown.hard_deadline(task.request, task.time_limit, time.monotonic())
    opened = store.open_batch(run_id, idx, first, count) if may_run_open(task) else None
    batch = _Batch(runtime, task, (run_id, idx, first, count), fields)
    if opened is not None and opened.claims:
        batch.opened, claims = opened, opened.claims
    else:
        batch.owner = runtime.leases.item_token()
        claims = store.claim_batch(
            run_id, idx, first, count, batch.owner, config.lock_timeout, config.max_recoveries
        )
    runnable = [(item, claim) for item, claim in claims if claim.status == "running"]
    line = taskevents.run_line(run_id, 0, idx, task.name, item=first)
    if not runnable:
        logger.info(
            "batch of items %d-%d of step %d (%s) of run %s: nothing to run (recorded, "
            "running elsewhere, waiting out a retry backoff, or its run is over)",
            first,
            first + count - 1,
            idx,
            task.name,
            run_id,
            extra=fields,
        )
        raise taskevents.ended(runtime.app, task.request.id, None, f"nothing to run {line}")
    if batch.owner is not None:
        batch.track([item for item, _ in runnable])
    try:
        for item, claim in runnable:
            if not batch.still_held(item):
                continue
            batch.outcomes.append(batch.run_one(item, claim))
            if time.monotonic() - batch.flushed >= config.lock_timeout / 3:
                batch.flush()  # past a lease beat: record what ran, as the lease asks
        batch.flush(final=True)
    except BaseException as exc:
        if shutdown.interruption(exc, deadline) is not None:
            batch.give_back()
        raise
    finally:
        batch.close()
    return taskevents.finished_task(runtime.app, task.request.id, None, line)


class _Batch:
    """One batch task's items: what ran and is not recorded yet, and checks. ``opened``
    while its first delivery's transaction is open, else ``owner``'s claimed items."""

    def __init__(
        self,
        runtime: RuntimeView,
        task: Task,
        key: tuple[str, int, int, int],
        fields: dict[str, Any],
    ) -> None:
        self.runtime, self.task, self.key, self.fields = runtime, task, key, fields
        self.opened: OpenBatch | None = None
        self.owner: str | None = None
        self.tracked: list[tuple[str, int, int, str]] = []
        self.outcomes: list[Settled] = []
        self.flushed = self.checked = time.monotonic()
        self.held: set[int] | None = None  # None: all claimed ones (nothing read since)
        self.cancelled = False

    def track(self, items: list[int]) -> None:
        """Have the heartbeat renew ``owner``'s leases of ``items``."""
        run_id, idx, _, _ = self.key
        assert self.owner is not None
        for item in items:
            held = (run_id, idx, item, self.owner)
            self.runtime.leases.track_item(held)
            self.tracked.append(held)

    def close(self) -> None:
        """The task is over: an open transaction still open is rolled back (nothing it
        ran is recorded), the leases are no longer renewed."""
        if self.opened is not None:
            self.opened.abandon()
        for held in self.tracked:
            self.runtime.leases.untrack_item(held)

    def still_held(self, item: int) -> bool:
        """Whether to run ``item``: re-read once a poll interval, so that a revoke or the
        run's cancellation stops the items not run yet."""
        if self.cancelled:
            return False
        if time.monotonic() - self.checked >= self.runtime.config.poll_interval:
            run_id, idx, first, count = self.key
            owner = None if self.is_open else self.owner
            items = FANOUT.of(self.runtime.store)
            active, self.held = items.check_batch(run_id, idx, first, count, owner)
            self.checked = time.monotonic()
            if not active:
                self.cancelled = True
                logger.info(
                    "batch of step %d (%s) of run %s stops before item %d: the run is "
                    "cancelled or over; its items not run yet are cancelled",
                    idx,
                    self.task.name,
                    run_id,
                    item,
                    extra=self.fields,
                )
                return False
        return self.held is None or item in self.held

    @property
    def is_open(self) -> bool:
        return self.opened is not None and self.opened.is_open

    def run_one(self, item: int, claim: ItemClaim) -> Settled:
        """Run one item under the step's retry policy: its outcome, or a retry."""
        run_id, idx, _, _ = self.key
        runtime, task = self.runtime, self.task
        step = runtime.steps.get(claim.name)
        if step is None:
            failure = PermanentError(f"no step {claim.name!r} is registered in this worker")
            return Settled(item, "error", error=serialization.encode_error(failure))
        args, kwargs = serialization.loads(claim.input)
        attempt = claim.attempts
        while True:
            try:
                value = step.fn(*args, **kwargs)
                owner_name = f"step {step.name}"
                output = serialization.encode_value(
                    owner_name,
                    value,
                    runtime.config.max_payload_bytes,
                    runtime.config.max_payload_depth,
                )
                return Settled(item, "ok", output=output)
            except Exception as exc:  # noqa: BLE001 - every failure is recorded or retried
                error = serialization.encode_error(exc)
                retry = attempt < step.options.max_attempts and step.retryable(exc)
                if not retry or isinstance(exc, NotSerialisable):
                    logger.info(
                        "item %d of step %d (%s) of run %s failed: %r",
                        item,
                        idx,
                        step.name,
                        run_id,
                        exc,
                        extra={**self.fields, "item": item},
                    )
                    return Settled(item, "error", error=error)
                delay = step.delay_after(attempt)
                log_item_retry(step, run_id, idx, item, attempt, delay, exc, self.fields)
                if not task.request.is_eager:
                    # The backoff waits in the database; the sweeper publishes the item
                    # again when due, as an item task of its own.
                    return Settled(item, "retry", error=error, delay=delay)
                # Eager mode has no sweeper to publish it again: retry in-process,
                # counting the attempt on the item's row as a worker's retry would.
                time.sleep(delay)
                assert self.owner is not None  # eager mode claims its batches
                FANOUT.of(runtime.store).count_item_attempt(run_id, idx, item, self.owner, error)
                attempt += 1

    def flush(self, *, final: bool = False) -> None:
        """Record what ran (and cancel what is left, if the run was cancelled), in one
        transaction; publish the parent it woke. An open batch's first flush commits its
        transaction: unless ``final``, the items not run yet become claimed ones."""
        run_id, idx, first, count = self.key
        outcomes, self.outcomes = self.outcomes, []
        self.flushed = time.monotonic()
        runtime = self.runtime
        grace = runtime.config.dispatch_grace
        if self.is_open:
            assert self.opened is not None
            convert = None
            if not final and not self.cancelled:
                convert = (runtime.leases.item_token(), runtime.config.lock_timeout)
            written, converted = self.opened.settle(
                outcomes, grace, cancel_rest=self.cancelled, convert=convert
            )
            if convert is not None:
                self.owner = convert[0]
                self.track(converted)
                self.held = set(converted)
        elif not outcomes and not self.cancelled:
            return
        else:
            assert self.owner is not None
            cancel_rest = (first, count) if self.cancelled else None
            written = FANOUT.of(runtime.store).settle_batch(
                run_id, idx, self.owner, outcomes, grace, cancel_rest=cancel_rest
            )
        lost = sorted({done.item for done in outcomes} - set(written.recorded))
        if lost:
            logger.warning(
                "items %s of step %d of run %s ran, but their outcomes were not recorded: "
                "another delivery recorded them first (their lease had expired), or they "
                "were revoked",
                lost,
                idx,
                run_id,
                extra=self.fields,
            )
        logger.debug(
            "batch of step %d (%s) of run %s recorded %d item(s)%s",
            idx,
            self.task.name,
            run_id,
            len(written.recorded),
            "; its run is woken" if written.woken is not None else "",
            extra=self.fields,
        )
        faults.reach(faults.AFTER_RECORD_ITEM, **self.fields)
        publish_woken(runtime, written.woken, f"items of step {idx} settled")

    def give_back(self) -> None:
        """The process is being stopped: record what ran, give the rest back, due at
        once (not a failed attempt)."""
        run_id, idx, first, count = self.key
        try:
            self.flush()
        finally:
            released = 0
            if self.owner is not None:
                held = [(run_id, idx, item, self.owner) for item in range(first, first + count)]
                released = FANOUT.of(self.runtime.store).release_items(held)
            if released:
                logger.warning(
                    "batch of step %d (%s) of run %s interrupted; %d item lease(s) given back",
                    idx,
                    self.task.name,
                    run_id,
                    released,
                    extra=self.fields,
                )


def log_item_retry(
    step: Step[Any, Any],
    run_id: str,
    idx: int,
    item: int,
    attempt: int,
    delay: float,
    exc: BaseException,
    fields: dict[str, Any],
) -> None:
    """An item's failure that is retried, logged alike by an item task and by a batch."""
    logger.warning(
        "item %d of step %d (%s) of run %s failed (attempt %d of %d), retrying in %.2fs: %r",
        item,
        idx,
        step.name,
        run_id,
        attempt,
        step.options.max_attempts,
        delay,
        exc,
        extra={**fields, "item": item},
    )
