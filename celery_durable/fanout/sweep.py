"""The sweep pass of items: publish again the lost, the orphaned and the due retries of
fan-out items, fail poison items, and wake the runs whose awaited items have all settled
but were never woken.

Example::

    runtime.sweep_passes.append(SweepPass("items", ItemSweep(runtime, runtime.sweeper)))
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from celery_durable.core.logs import run_fields
from celery_durable.engine.publish import publish_woken
from celery_durable.engine.sweeper import worker_lost_error
from celery_durable.fanout.store_area import FANOUT

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.engine.sweeper import Sweeper
    from celery_durable.store import DueItem

logger = logging.getLogger("celery_durable.worker")

# Seconds between two warnings about the same queue that no worker consumes.
IDLE_QUEUE_WARN_EVERY = 60.0


class ItemSweep:
    """One pass over the items of this Durable's steps; returns how many it published."""

    def __init__(self, runtime: RuntimeView, sweeper: Sweeper) -> None:
        self.runtime = runtime
        self.sweeper = sweeper
        self._warned: dict[str, float] = {}

    def __call__(self) -> int:
        """Items: publish again the lost, the orphaned and the due retries; fail poison
        items; wake runs whose awaited items have all settled but were never woken."""
        runtime, config = self.runtime, self.runtime.config
        names = sorted(runtime.workflows)
        store, grace = FANOUT.of(runtime.store), config.dispatch_grace
        published = 0
        steps = sorted(runtime.steps)
        # Gathered over every page of due items, so that a batch split across two pages
        # still goes as one message.
        batches: dict[tuple[str, str | None, str, int, int], list[int]] = {}
        seen: set[tuple[str, int, int]] = set()
        while steps:
            due = store.sweep_due_items(
                config.sweep_batch, grace, steps, config.max_recoveries, self.sweeper.takeover
            )
            idle = self.idle_queues(due)
            again = False  # a page ends the loop once it brings an item back
            for item in due:
                if (item.run_id, item.idx, item.item) in seen:
                    again = True  # due again already (a grace of ~0): published once
                    continue
                seen.add((item.run_id, item.idx, item.item))
                if item.dispatches > 1 and item.queue in idle:
                    continue  # its message waits in the queue: no copy
                # Items not attempted yet go again in the batches they were sent in; a
                # retry or a recovered item goes alone (a poison item fails by itself).
                size = (item.batch_size or 1) if item.never_started else 1
                key = (item.name, item.queue, item.run_id, item.idx, size)
                batches.setdefault(key, []).append(item.item)
            if again or len(due) < config.sweep_batch:
                break
        for (name, queue, run_id, idx, size), numbers in batches.items():
            runtime.dispatch.publish_items(name, queue, run_id, idx, numbers, size)
            published += len(numbers)
            logger.info(
                "dispatched %d item(s) of step %d (%s) of run %s again",
                len(numbers),
                idx,
                name,
                run_id,
                extra=run_fields(run_id, step_index=idx),
            )
        if steps:
            lost_error = worker_lost_error(config.max_recoveries, "step")
            lost_now = store.lost_items(
                config.sweep_batch, steps, config.max_recoveries, self.sweeper.takeover
            )
            for lost in lost_now:
                written = store.settle_item(
                    lost.run_id, lost.idx, lost.item, lost.owner, "error", None, lost_error, grace
                )
                logger.error(
                    "item %d of step %d of run %s failed: its worker was lost %d times",
                    lost.item,
                    lost.idx,
                    lost.run_id,
                    config.max_recoveries,
                    extra=run_fields(lost.run_id, step_index=lost.idx),
                )
                publish_woken(runtime, written.woken, "a poison item failed")
        for parent_id, idx, child_id in store.orphaned_children(config.sweep_batch):
            woken = store.settle_child_item(parent_id, idx, child_id, grace)
            publish_woken(runtime, woken, f"its child {child_id} had finished")
        for run in store.wake_item_waiters(grace, names):
            # The transaction that settled its last item did not wake it (a crash?).
            done = "woke workflow %s run %s: its items have settled"
            published += self.sweeper.publish_again(run, done)
        return published

    def idle_queues(self, due: list[DueItem]) -> set[str]:
        """The queues of the due items already published that no worker consumes (asked
        off the hot path: only with such items due, the answer kept a while). Their
        messages wait there, as any Celery task's would: the sweeper publishes no copy,
        and names the queue in a warning, at most once a minute."""
        published = [item for item in due if item.queue and item.dispatches > 1]
        idle = self.sweeper.queues.unconsumed({str(item.queue) for item in published})
        now = time.monotonic()
        for queue in sorted(idle):
            if now - self._warned.get(queue, float("-inf")) < IDLE_QUEUE_WARN_EVERY:
                continue
            self._warned[queue] = now
            waiting = [item for item in published if item.queue == queue]
            runs = sorted({item.run_id for item in waiting})
            logger.warning(
                "no worker consumes queue %r: %d item(s) of step %s (run %s%s) were published "
                "to it and have not started; start a worker for it (celery worker -Q %s). "
                "Their messages wait in the queue; the sweeper publishes no copies meanwhile "
                "(no running worker listed the queue in its reply to inspect active_queues)",
                queue,
                len(waiting),
                waiting[0].name,
                runs[0],
                f" and {len(runs) - 1} more" if len(runs) > 1 else "",
                queue,
                extra={**run_fields(runs[0]), "queue": queue},
            )
        return idle
