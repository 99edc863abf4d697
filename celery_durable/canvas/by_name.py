"""Runs started by name: a workflow message with no run behind it (``send_task`` from a
process without the workflow's code, ``celery call``, beat, another language's client)
creates its run on its first delivery, from the message.

Its delivery hooks, which wiring.py registers: ``claim_started_by_name`` (a claim
fallback: store the run, then claim it) and ``settle_refused`` (arguments the workflow
can't take: the run is settled FAILED before any body runs).

Example::

    refused = start_by_name(task, request, args, kwargs, carried)   # in run_workflow
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kombu.utils.encoding import safe_repr

from celery_durable.canvas.reports import Canvas, report_settled
from celery_durable.core import serialization
from celery_durable.core.logs import log_started, run_fields
from celery_durable.engine.definition import WorkflowDefinition
from celery_durable.engine.delivery import request_header
from celery_durable.engine.guard import ARGUMENTS_REFUSED
from celery_durable.engine.hooks import Delivery
from celery_durable.engine.runtime import Runtime
from celery_durable.errors import ArgumentsRefused
from celery_durable.store import Claim, NewRun, OwedReport

logger = logging.getLogger("celery_durable.workflow")
WING = "by name"  # the delivery's wing state: the arguments refused, if they were


class Starter(Protocol):
    """What of the workflow's task a start by name needs (WorkflowTask has it)."""

    runtime: Runtime
    definition: WorkflowDefinition

    def _new_run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
    ) -> Callable[[str], NewRun]: ...


def start_by_name(
    task: Starter, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any], carried: Canvas
) -> ArgumentsRefused | None:
    """A message sent by name (``send_task``, ``celery call``, beat, another client)
    whose run doesn't exist: store the run from it, with the task id as its id and
    the canvas it carried, as if ``.delay()`` had started it (the insert is
    idempotent: a duplicate delivery finds the run). Arguments the workflow can't
    take are stored too, with the error returned: the run is to be settled FAILED."""
    definition = task.definition
    delivery = getattr(request, "delivery_info", None) or {}
    options: dict[str, Any] = {"queue": delivery.get("routing_key") or definition.queue}
    refused: ArgumentsRefused | None = None
    # The worker's main process took out arguments its pool could not have taken.
    taken_out = request_header(request, ARGUMENTS_REFUSED)
    try:
        if taken_out:
            raise TypeError(taken_out)
        new_run = task._new_run(tuple(args), dict(kwargs), options)
    except (TypeError, ValueError) as exc:
        refused = ArgumentsRefused(
            f"workflow {definition.name} run {request.id!r} was sent by name with "
            f"arguments it can't take: {exc}"
        )
        new_run = _refused_run(task, args, kwargs, options)
    run = dataclasses.replace(new_run(request.id), canvas=carried.encode(definition.name))
    if task.runtime.store.insert_run(run):
        log_started(definition.name, request.id, None)
    return refused


def _refused_run(
    task: Starter, args: Any, kwargs: Any, options: dict[str, Any]
) -> Callable[[str], NewRun]:
    """The row of a run whose arguments were refused: they are kept as sent (as text
    when JSON can't hold them), for the operator to read."""
    try:
        # Two levels are the list of arguments and the pair: then each argument's own.
        if serialization.nesting_depth([args, kwargs]) > task.runtime.config.max_payload_depth + 2:
            raise ValueError("nested too deeply to store")
        encoded = serialization.dumps([list(args or ()), dict(kwargs or {})])
    except (TypeError, ValueError, RecursionError):
        encoded = serialization.dumps([[safe_repr(args)], {"kwargs": safe_repr(kwargs)}])
    config = task.runtime.config
    size = serialization.payload_size(encoded, config.max_payload_bytes)
    if size is not None:
        # The error says nothing was stored: a note of what was sent stands in for them.
        note = (
            f"not stored: the arguments are {size} bytes as JSON, over the limit of "
            f"{config.max_payload_bytes} bytes ({serialization.MAX_PAYLOAD_SETTING})"
        )
        encoded = serialization.dumps([[note], {}])
    return lambda run_id: NewRun(
        id=run_id,
        name=task.definition.name,
        args=encoded,
        queue=options.get("queue"),
        max_attempts=1,
        retry_backoff=config.retry_backoff,
        dispatch_grace=config.dispatch_grace,
    )


def claim_started_by_name(delivery: Delivery) -> Claim | None:
    """The claim fallback of a message that may store its run (``start_by_name``)."""
    start = delivery.start_if_missing
    if start is None:
        return None
    delivery.wings[WING] = start()
    return delivery.claim_run()


def settle_refused(delivery: Delivery) -> None:
    """A run sent by name with arguments the workflow can't take: stored FAILED with the
    error naming them (never dropped), reported like any failure; Celery's FAILURE."""
    refused, claim = delivery.wings.get(WING), delivery.claim
    if refused is None or claim is None:
        return
    runtime, run_id, name = delivery.runtime, delivery.run_id, delivery.definition.name
    error = serialization.encode_error(refused, step=None)
    status = runtime.store.settle_run(run_id, claim.fence, "FAILED", error=error)
    logger.error("%s", refused, extra=run_fields(run_id, name, claim.attempts))
    if status == "FAILED" and claim.canvas is not None:
        owed = OwedReport(run_id, name, status, "", None, error, None, claim.canvas)
        report_settled(runtime, owed)
    raise refused
