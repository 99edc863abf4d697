"""Publish, and leave it to the sweeper if that fails: the one rule of every publish whose
row is already stored (a started or resumed run, a woken parent, item tasks, a signal's
wake-up, a sweep's re-dispatch); and the engine's publishers of item tasks and woken runs.

The row is the source of truth and is due after ``durable_dispatch_grace``, so a broker
that refuses the message loses nothing: the failure is logged, with its traceback, and a
sweep publishes the row again.

Example::

    published = publish_or_leave(
        lambda: runtime.publish(run.id, run.name, run.args, run.queue),
        logger, "workflow %s run %s", run.name, run.id, fields=run_fields(run.id, run.name),
    )
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from celery import Celery, Task

from celery_durable.core import tracing
from celery_durable.core.ids import derived_id
from celery_durable.core.logs import run_fields

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView
    from celery_durable.store import DueRun

# Item tasks and wake-ups log as they did beside the item tasks.
logger = logging.getLogger("celery_durable.items")

# On every message of a stored run: a workflow message without it was sent by name
# (send_task, celery call, beat) and creates its run on its first delivery.
STORED_HEADER = "durable_stored"

# What the sweeper does with a stored run whose publish failed.
SWEEPER_DISPATCHES = "the sweeper will dispatch it"


def publish_or_leave(
    publish: Callable[[], object],
    log: logging.Logger,
    what: str,
    *args: object,
    fields: Mapping[str, Any],
    then: str = SWEEPER_DISPATCHES,
    level: int = logging.ERROR,
    failed: Callable[[Exception], None] | None = None,
) -> bool:
    """Call ``publish``; True if it returned. If it raised, log ``publishing <what> failed;
    <then>`` (``what`` formatted with ``args``) at ``level`` with the traceback and
    ``fields``, and return False. ``failed`` runs first with the error: it may raise
    instead (a caller who must be told), or hand the row to any sweeper."""
    try:
        publish()
    except Exception as exc:  # noqa: BLE001 - the stored row is the source of truth
        if failed is not None:
            failed(exc)
        log.log(level, f"publishing {what} failed; {then}", *args, exc_info=True, extra=fields)
        return False
    return True


def item_task_id(run_id: str, idx: int, item: int, count: int = 1) -> str:
    """The Celery task id of an item, or of a batch of ``count`` items from ``item``
    (``<run id>:<step>:<first>-<last>``): derived, so every dispatch of it is the same
    task."""
    if count == 1:
        return derived_id(f"{run_id}:{idx}:{item}")
    return derived_id(f"{run_id}:{idx}:{item}-{item + count - 1}")


def batch_ranges(items: Iterable[int], batch_size: int) -> list[tuple[int, int]]:
    """(first, count) of each batch message for ``items``: a map's batch ``k`` is its items
    ``k * batch_size`` to ``(k + 1) * batch_size - 1``, and a message carries consecutive
    items of one batch. So a whole batch published again is the same task (the same id as
    its first message); a gap (an item recorded or running meanwhile) splits it."""
    ranges: list[tuple[int, int]] = []
    for item in sorted(set(items)):
        if ranges:
            first, count = ranges[-1]
            if item == first + count and item // batch_size == first // batch_size:
                ranges[-1] = (first, count + 1)
                continue
        ranges.append((item, 1))
    return ranges


def queue_option(app: Celery, queue: str | None) -> dict[str, Any]:
    """The ``queue`` option of a publish to ``queue`` (none: the task's routing decides).
    Given by name, Celery adds a queue it doesn't know to ``app.amqp.queues``; from the
    sweeper's thread that races the consumer's start, which iterates that dict ("dictionary
    changed size during iteration" ended a worker). The same Queue, built without adding it,
    publishes the same message."""
    if not queue:
        return {}
    queues = app.amqp.queues
    known = queues.get(queue)
    return {"queue": known if known is not None else queues.new_missing(queue)}


class Dispatch:
    """Publishes item tasks and runs for a body (the context's ``DispatchView``)."""

    def __init__(self, runtime: RuntimeView) -> None:
        self.runtime = runtime

    @property
    def dispatch_grace(self) -> float:
        return self.runtime.config.dispatch_grace

    @property
    def in_process(self) -> bool:
        return bool(self.runtime.app.conf.task_always_eager)

    def publish_items(
        self,
        step_name: str,
        queue: str | None,
        run_id: str,
        idx: int,
        items: Iterable[int],
        batch_size: int = 1,
    ) -> None:
        """One message per item, or with ``batch_size`` > 1 one per batch of consecutive
        ``items`` within one of the map's batches (``batch_ranges``), its last argument the
        batch's item count."""
        app = self.runtime.app
        namespace = self.runtime.config.namespace
        options = queue_option(app, queue)
        tracing.add_start_headers(options)  # each item's span: a child of the dispatcher's
        task = app.tasks.get(step_name)
        messages: list[tuple[Any, ...]] = [(namespace, run_id, idx, item) for item in items]
        if batch_size > 1:
            ranges = batch_ranges((m[3] for m in messages), batch_size)
            messages = [(namespace, run_id, idx, first, count) for first, count in ranges]

        def publish() -> None:
            if app.conf.task_always_eager or task is None:
                for args in messages:
                    self._publish_one(task, step_name, args, options)
                return
            # One producer (one connection) for the whole batch.
            with app.producer_or_acquire() as producer:
                for args in messages:
                    self._publish_one(task, step_name, args, {**options, "producer": producer})

        publish_or_leave(
            publish,
            logger,
            "items of step %d (%s) of run %s",
            idx,
            step_name,
            run_id,
            fields=run_fields(run_id, step_index=idx),
            then="the sweeper publishes them after durable_dispatch_grace",
        )

    def _publish_one(
        self, task: Task | None, name: str, args: tuple[Any, ...], options: dict[str, Any]
    ) -> None:
        task_id = item_task_id(*args[1:])
        if task is not None:
            # Through the registered task: task_always_eager runs the item in-process.
            task.apply_async(args, task_id=task_id, **options)
        else:  # a step this process doesn't import: publish by name
            self.runtime.app.send_task(name, args, task_id=task_id, **options)

    def concurrency(self) -> int:
        """The fleet's pool processes (asked at most once a dispatch grace)."""
        return self.runtime.fleet.concurrency(max(self.dispatch_grace, 5.0))

    def publish_run(self, run: DueRun) -> None:
        self.runtime.publish(run.id, run.name, run.args, run.queue)

    def terminate(self, run_id: str) -> None:
        self.runtime.app.control.revoke(run_id, terminate=True, signal="SIGTERM")


def publish_woken(runtime: RuntimeView, woken: DueRun | None, why: str) -> None:
    """Publish a parent an item (or child) woke; a lost publish is the sweeper's."""
    if woken is None:
        return
    fields = run_fields(woken.id, woken.name)
    if publish_or_leave(
        lambda: runtime.publish(woken.id, woken.name, woken.args, woken.queue),
        logger,
        "workflow run %s (%s)",
        woken.id,
        why,
        fields=fields,
        then="the sweeper dispatches it",
    ):
        logger.info("workflow %s run %s woken: %s", woken.name, woken.id, why, extra=fields)
