"""Signals: stored in the database, their wake-ups carried by a dedicated Celery queue.

Every worker consumes ``durable_signal_queue`` (default ``celery_durable.signals``) on top
of its ``-Q`` queues; nothing to configure.

Example::

    @durable.workflow
    def booking(booking_id: str) -> dict:
        decision = cd.wait_for_signal("approval", timeout=3600)   # None on timeout
        ...

    handle.signal("approval", {"by": "alice"}, idempotency_key="approve-b-1")
    durable.send_signal("wf-id", "approval", {"by": "bob"})   # producers with a broker only
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps

from . import serialization
from .errors import PendingSignalsFull, WorkflowAlreadyCompleted, WorkflowNotFound
from .store.store import DUPLICATE, FULL, NOT_FOUND, STORED
from .waits import SIGNAL_STEP_PREFIX, require_context, wait_step

if TYPE_CHECKING:
    from .extension import Durable

logger = logging.getLogger("celery_durable.signals")

SIGNAL_TASK = "celery_durable.signal"
# A broker-only signal for a run not (yet) in the store is retried 0.25+0.5+1+2 s later.
NOT_FOUND_RETRIES = 4
WAKE_TASK = "celery_durable.wake"


def wait_for_signal(name: str, timeout: float | None = None) -> Any:
    """Wait for the next signal ``name``; return its payload, or None after ``timeout`` s.

    The run is suspended while it waits (status WAITING, no worker held). Signals of one
    name are consumed in the order sent, each by exactly one call.
    """
    ctx = require_context("wait_for_signal")
    _check_name(name)
    if timeout is not None and (timeout != timeout or timeout < 0):
        raise ValueError(f"wait_for_signal(timeout) must be None or >= 0, got {timeout!r}")
    return wait_step(ctx, SIGNAL_STEP_PREFIX + name, "[]", timeout=timeout, signal=name)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError(
            f"a signal name must be a non-empty string of at most 200 characters, got {name!r}"
        )


def _encode_payload(name: str, payload: Any) -> str:
    try:
        return serialization.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the payload of signal {name!r} is not JSON serialisable: {exc}") from None


def store_signal(
    durable: Durable,
    workflow_id: str,
    name: str,
    payload_json: str,
    idempotency_key: str | None,
) -> bool:
    """Store a signal; True if stored, False for a repeated idempotency key."""
    config = durable.config
    outcome = durable.store.insert_signal(
        workflow_id, name, payload_json, idempotency_key, config.max_pending_signals
    )
    if outcome == STORED:
        return True
    if outcome == DUPLICATE:
        return False
    if outcome == NOT_FOUND:
        raise WorkflowNotFound(workflow_id)
    if outcome == FULL:
        raise PendingSignalsFull(
            f"workflow run {workflow_id!r} already holds {config.max_pending_signals} "
            f"unconsumed signals (durable_max_pending_signals); signal {name!r} refused"
        )
    raise WorkflowAlreadyCompleted(workflow_id, outcome)


def send_signal(
    durable: Durable,
    workflow_id: str,
    name: str,
    payload: Any = None,
    idempotency_key: str | None = None,
) -> bool:
    """Store the signal (before returning), then publish its wake-up on the signal queue.

    Returns False when ``idempotency_key`` was seen before for this run (a no-op).
    """
    _check_name(name)
    encoded = _encode_payload(name, payload)
    if not store_signal(durable, workflow_id, name, encoded, idempotency_key):
        return False
    try:
        publish_wake(durable, workflow_id, name)
    except Exception:
        # Stored: the sweeper wakes the run if it waits for this signal.
        logger.exception(
            "publishing the wake-up of workflow %s failed; the sweeper will wake it",
            workflow_id,
            extra={"workflow_id": workflow_id},
        )
    return True


def publish_wake(durable: Durable, workflow_id: str, name: str) -> None:
    _publish(durable, WAKE_TASK, (durable.config.namespace, workflow_id, name))


def _publish(durable: Durable, task_name: str, args: tuple[Any, ...], **options: Any) -> None:
    # Through the registered task rather than send_task: task_always_eager then runs the
    # whole signal path in-process, which makes eager mode a complete test harness.
    durable.app.tasks[task_name].apply_async(args, queue=durable.config.signal_queue, **options)


def send_signal_via_broker(
    durable: Durable,
    workflow_id: str,
    name: str,
    payload: Any = None,
    idempotency_key: str | None = None,
) -> str:
    """Publish a signal for a worker to store: needs the broker only, no database.

    Without ``idempotency_key`` the message id is used, so a redelivered message is
    stored once. Errors (no such run, finished, full) are logged by the worker and the
    signal is kept in the signals table with the reason. Returns the message id.
    """
    _check_name(name)
    encoded = _encode_payload(name, payload)
    message_id = str(uuid.uuid4())
    args = (
        durable.config.namespace,
        workflow_id,
        name,
        encoded,
        idempotency_key or f"message:{message_id}",
    )
    _publish(durable, SIGNAL_TASK, args, task_id=message_id)
    return message_id


def register_tasks(app: Celery) -> None:
    """The two tasks of the signal queue, once per app; they find the Durable by namespace."""
    if SIGNAL_TASK in app._tasks:  # noqa: SLF001 - .tasks would finalize the app
        return

    from .extension import durables_of

    def durable_for(namespace: str) -> Durable:
        for durable in durables_of(app):
            if durable.config.namespace == namespace:
                return durable
        raise LookupError(f"no Durable with namespace {namespace!r} is bound to this app")

    @app.task(
        name=SIGNAL_TASK,
        shared=False,
        lazy=False,
        acks_late=True,
        ignore_result=True,
        bind=True,
        max_retries=NOT_FOUND_RETRIES,
    )
    def receive_signal(
        task: Any,
        namespace: str,
        workflow_id: str,
        name: str,
        payload_json: str,
        idempotency_key: str | None,
    ) -> bool:
        durable = durable_for(namespace)
        fields = {"workflow_id": workflow_id, "signal": name}
        try:
            stored = store_signal(durable, workflow_id, name, payload_json, idempotency_key)
        except WorkflowNotFound as exc:
            # The run may not be committed yet (a transactional start): ask again shortly.
            if task.request.retries < NOT_FOUND_RETRIES:
                raise task.retry(countdown=0.25 * 2**task.request.retries, exc=exc) from exc
            _refuse(durable, workflow_id, name, payload_json, idempotency_key, exc, fields)
            raise
        except (WorkflowAlreadyCompleted, PendingSignalsFull) as exc:
            _refuse(durable, workflow_id, name, payload_json, idempotency_key, exc, fields)
            raise
        if stored:
            wake(durable, workflow_id, name)
        return stored

    @app.task(name=WAKE_TASK, shared=False, lazy=False, acks_late=True, ignore_result=True)
    def wake_task(namespace: str, workflow_id: str, name: str) -> bool:
        return wake(durable_for(namespace), workflow_id, name)


def _refuse(
    durable: Durable,
    workflow_id: str,
    name: str,
    payload_json: str,
    idempotency_key: str | None,
    exc: Exception,
    fields: dict[str, Any],
) -> None:
    """Keep a signal the store refused, with the reason, and log it."""
    durable.store.reject_signal(
        workflow_id, name, payload_json, idempotency_key, f"{type(exc).__name__}: {exc}"
    )
    logger.error(
        "signal %r for workflow %s refused and kept: %s", name, workflow_id, exc, extra=fields
    )


def wake(durable: Durable, workflow_id: str, name: str) -> bool:
    """If the run waits for ``name``, make it PENDING and publish it."""
    run = durable.store.wake_run(workflow_id, name, durable.config.dispatch_grace)
    if run is None:
        return False
    durable.publish(run.id, run.name, run.args, run.queue)
    return True


def signal_queue_bootstep(durable: Durable) -> type[bootsteps.StartStopStep]:
    """A consumer bootstep that makes every worker consume the signal queue."""

    class SignalQueue(bootsteps.StartStopStep):  # type: ignore[misc]
        name = f"celery_durable.signal_queue.{id(durable):x}"
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def start(self, consumer: Any) -> None:
            queue = durable.config.signal_queue
            consumer.add_task_queue(queue)
            logger.info("consuming the signal queue %r", queue)

    return SignalQueue
