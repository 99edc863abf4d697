"""A workflow delivery whose claim found the database unreachable or unusable (no tables
yet): published again a little later, backing off, and this one acknowledged. Never
dropped: a run started by name stays one (its message still creates the run, with the
canvas it carried), so a worker started before ``durable migrate`` loses nothing.

Example::

    except ClaimUnavailable as unavailable:        # in WorkflowTask.run_workflow
        redeliver_later(self, args, kwargs, unavailable, carried)
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn, Protocol

from celery import Celery, Task
from celery.exceptions import Reject
from kombu.utils.encoding import safe_repr

from celery_durable.core import tracing
from celery_durable.core.logs import run_fields
from celery_durable.core.retry import backoff
from celery_durable.engine import taskevents
from celery_durable.engine.definition import WorkflowDefinition
from celery_durable.engine.delivery import TRANSACTIONAL_HEADER, ClaimUnavailable, request_header
from celery_durable.engine.publish import STORED_HEADER
from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.workflow")

# How often a delivery found the database unreachable: its redelivery backs off.
REDELIVERY_HEADER = "durable_redeliveries"
_MAX_REDELIVERY_DELAY = 10.0


class CarriedCanvas(Protocol):
    """The canvas a message carried (``canvas.reports.Canvas``), as its options read it."""

    @property
    def report(self) -> bool: ...
    @property
    def callbacks(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def errbacks(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def chain(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def chord(self) -> dict[str, Any] | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def group_index(self) -> int | None: ...
    @property
    def root_id(self) -> str | None: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def reply_to(self) -> str | None: ...


class Redelivered(Protocol):
    """What of the workflow's task a redelivery needs (WorkflowTask has it)."""

    app: Celery
    runtime: Runtime
    definition: WorkflowDefinition
    request: Any


def redeliver_later(
    task: Redelivered,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    unavailable: ClaimUnavailable,
    carried: CarriedCanvas,
) -> NoReturn:
    """Publish this delivery again a little later (backing off) instead of dropping it,
    and acknowledge this one. Not an attempt of the run: nothing ran (Flower shows RETRY,
    not SUCCESS). ``carried``: the canvas the message carried, which a start by name
    stores with its run."""
    request = task.request
    redeliveries = int(request_header(request, REDELIVERY_HEADER) or 0)
    delay = backoff(0.5, redeliveries, _MAX_REDELIVERY_DELAY)
    headers: dict[str, Any] = {REDELIVERY_HEADER: redeliveries + 1, **tracing.carried(request)}
    options: dict[str, Any] = {}
    if request_header(request, STORED_HEADER):
        headers[STORED_HEADER] = True
    else:  # sent by name: the run isn't stored yet, the next delivery stores it
        options = _canvas_options(carried)
    if request_header(request, TRANSACTIONAL_HEADER):
        headers[TRANSACTIONAL_HEADER] = True
    delivery = getattr(request, "delivery_info", None) or {}
    queue = delivery.get("routing_key") or task.definition.queue
    if queue:
        options["queue"] = queue
    why = _log_kept(task, unavailable, delay, redeliveries + 1)
    try:
        Task.apply_async(
            task, args, kwargs, task_id=request.id, countdown=delay, headers=headers, **options
        )
    except Exception as exc:
        # Neither the database nor the broker: hand the message back to the broker.
        raise Reject(f"could not publish run {request.id} again: {exc!r}", requeue=True) from exc
    text = f"the database is {why}; delivering run {request.id} again in {delay:.1f}s"
    cause = safe_repr(unavailable.__cause__)
    raise taskevents.ended(task.app, request.id, taskevents.RETRIED, text, exception=cause)


def _canvas_options(carried: CarriedCanvas) -> dict[str, Any]:
    """The ``apply_async`` options that put ``carried`` on the message again."""
    options: dict[str, Any] = {
        "link": list(carried.callbacks) or None,
        "link_error": list(carried.errbacks) or None,
        "chain": list(carried.chain) or None,
        "chord": carried.chord,
        "group_id": carried.group,
        "group_index": carried.group_index,
        "root_id": carried.root_id,
        "parent_id": carried.parent_id,
        "reply_to": carried.reply_to,
        "ignore_result": not carried.report,
    }
    return {key: value for key, value in options.items() if value is not None}


def _log_kept(task: Redelivered, unavailable: ClaimUnavailable, delay: float, count: int) -> str:
    """Log the redelivery; returns what the database is ("unreachable", "not usable")."""
    request, name = task.request, task.definition.name
    fields = run_fields(request.id, name)
    problem = unavailable.unusable
    if problem is None:
        logger.warning(
            "workflow %s run %s: the database is unreachable (%s); delivering it again in "
            "%.1fs (redelivery %d)",
            name,
            request.id,
            unavailable.__cause__,
            delay,
            count,
            extra=fields,
        )
        return "unreachable"
    # Not the fix: the sweeper of this worker says that once (engine/leases.FailureLog).
    logger.info(
        "workflow %s run %s: the database is not usable (%s); the delivery is kept, "
        "delivered again in %.1fs (redelivery %d)",
        name,
        request.id,
        problem.text,
        delay,
        count,
        extra=fields,
    )
    return "not usable"
