"""Waking a run that waits for a signal: PENDING again and published, in one fenced
write; and what the wake-up task says it did (Flower and the worker's log show it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery_durable.core.logs import run_fields
from celery_durable.store import FINISHED_STATUSES

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.signals")


def wake(runtime: RuntimeView, run_id: str, name: str) -> bool:
    """If the run waits for ``name``, make it PENDING and publish it."""
    run = runtime.store.wake_run(run_id, name, runtime.config.dispatch_grace)
    if run is None:
        return False
    runtime.publish(run.id, run.name, run.args, run.queue)
    logger.info(
        "workflow %s run %s woken by signal %r",
        run.name,
        run.id,
        name,
        extra={**run_fields(run.id, run.name), "signal": name},
    )
    return True


def wake_outcome(runtime: RuntimeView, run_id: str, name: str) -> str:
    """Wake the run if it waits for ``name``; say what happened. It is the wake-up task's
    result, which Flower and the worker's log show: a bare False said nothing. (Names in
    double quotes: Celery shows a str result quoted, escaping single quotes.)"""
    if wake(runtime, run_id, name):
        return f'woke run {run_id}: it waited for signal "{name}"'
    # Nothing woken (the common case of a signal sent before its wait): one read says why.
    run = runtime.store.get_run(run_id)
    if run is None:
        return f"nothing to wake: no run {run_id}"
    if run.status in FINISHED_STATUSES:
        return f"nothing to wake: run {run_id} is {run.status}"
    waits = ""
    if run.status == "WAITING":  # a timer, items or a child when it names no signal
        waits = " for other steps" if run.wait_signal is None else f' for "{run.wait_signal}"'
    return (
        f"nothing to wake: run {run_id} is {run.status}{waits}, not waiting for signal "
        f'"{name}"; the signal stays pending until the run waits for it'
    )
