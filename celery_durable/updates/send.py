"""The caller's side of updates: store a request, wake the run, read its answer.
``WorkflowHandle.update`` and ``aupdate`` wait between reads (LISTEN/NOTIFY on Postgres,
polling on SQLite); these are the hooks they call, registered by ``wiring.py``.

Example::

    update_id = send_update(runtime, "order-42", "add_item", {"sku": "x"}, "add-x-1")
    answered, value, status = look_for_answer(runtime.store, "order-42", update_id)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.core import serialization, validate
from celery_durable.core.logs import run_fields
from celery_durable.engine.publish import publish_or_leave
from celery_durable.errors import (
    UpdateNotHandled,
    UpdateRejected,
    WorkflowAlreadyCompleted,
    WorkflowNotFound,
)
from celery_durable.store import FINISHED_STATUSES, Outcome, Store, is_unreachable
from celery_durable.store.engine_names import UPDATE_STEP_PREFIX
from celery_durable.updates.statements import ANSWERED, REFUSED, REJECTED
from celery_durable.updates.store_area import UPDATES

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.updates")


def send_update(
    runtime: RuntimeView,
    run_id: str,
    name: str,
    payload: Any = None,
    idempotency_key: str | None = None,
) -> int:
    """Store the request (before returning) and wake the run if it waits for it; the
    request's id. With an ``idempotency_key`` used before for this run, the request it
    stored then (nothing new is stored). WorkflowNotFound, WorkflowAlreadyCompleted."""
    validate.check_run_id(run_id)
    validate.check_signal_name(name, "update(name)")
    validate.check_idempotency_key(idempotency_key)
    config = runtime.config
    encoded = serialization.encode_json(
        f"the payload of update {name!r}",
        payload,
        config.max_payload_bytes,
        config.max_payload_depth,
    )
    stored = UPDATES.of(runtime.store).insert_update(run_id, name, encoded, idempotency_key)
    if stored.outcome is Outcome.NOT_FOUND:
        raise WorkflowNotFound(run_id)
    if stored.outcome is Outcome.FINISHED:
        raise WorkflowAlreadyCompleted(run_id, stored.status or "finished")
    assert stored.id is not None  # STORED and DUPLICATE carry the request's id
    if stored.outcome is Outcome.STORED:
        wake(runtime, run_id, name)
    return stored.id


def wake(runtime: RuntimeView, run_id: str, name: str) -> None:
    """If the run waits for update ``name``, make it PENDING and publish it. The request
    is stored: a wake-up that fails here is the sweeper's to make (``wake_updated_runs``)."""
    fields = {**run_fields(run_id), "update": name}
    try:
        run = runtime.store.wake_run(
            run_id, UPDATE_STEP_PREFIX + name, runtime.config.dispatch_grace
        )
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        logger.warning(
            "waking workflow %s for update %r failed (%s); the sweeper wakes it",
            run_id,
            name,
            exc,
            extra=fields,
        )
        return
    if run is None:
        return  # not waiting for it (yet): the body takes it when it asks
    publish_or_leave(
        lambda: runtime.publish(run.id, run.name, run.args, run.queue),
        logger,
        "the wake-up of workflow %s",
        run_id,
        fields=fields,
        then="the sweeper will dispatch it",
    )


def look_for_answer(store: Store, run_id: str, update_id: int) -> tuple[bool, Any, str]:
    """One look at the request, without waiting: (True, the answer, the run's status)
    once the body replied; (False, None, the run's status) while it may still answer.
    UpdateRejected (the body's or the validator's reason), UpdateNotHandled (the run
    finished without answering) or WorkflowNotFound once it can't."""
    state = UPDATES.of(store).read_update(run_id, update_id)
    if state is None or state.run_status is None:
        raise WorkflowNotFound(run_id)  # gone with its run (durable gc)
    if state.status == ANSWERED:
        return True, serialization.loads(state.answer or "null"), state.run_status
    if state.status in (REJECTED, REFUSED):
        raise UpdateRejected(run_id, state.name, state.answer or "")
    if state.run_status in FINISHED_STATUSES:
        raise UpdateNotHandled(run_id, state.name, state.run_status)
    return False, None, state.run_status


def wake_updated_runs(runtime: RuntimeView, publish: Any) -> int:
    """The sweeper's pass: publish the runs waiting for a request stored a dispatch grace
    ago whose wake-up was lost; how many were published."""
    names = sorted(runtime.workflows)
    woken = UPDATES.of(runtime.store).wake_updated_runs(runtime.config.dispatch_grace, names)
    published = 0
    for run in woken:
        published += publish(run, "woke workflow %s run %s for a stored update")
    return int(published)
