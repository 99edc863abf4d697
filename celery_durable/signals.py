"""Signals: stored in the database, their wake-ups carried by a dedicated Celery queue.

Every worker consumes ``durable_signal_queue`` (default ``celery_durable.signals``) on top
of its ``-Q`` queues; nothing to configure. The body's side is
:func:`celery_durable.wait_for_signal`.

Example::

    handle.signal("approval", {"by": "alice"}, idempotency_key="approve-b-1")
    durable.send_signal("wf-id", "approval", {"by": "bob"})   # producers with a broker only
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps

from . import serialization, validate
from .apps import durable_for, durables_of
from .errors import PendingSignalsFull, WorkflowAlreadyCompleted, WorkflowNotFound
from .store import Outcome
from .suspend import check_signal_name

if TYPE_CHECKING:
    from .extension import Durable

logger = logging.getLogger("celery_durable.signals")

SIGNAL_TASK = "celery_durable.signal"
# A broker-only signal for a run not (yet) in the store is retried 0.25+0.5+1+2 s later.
NOT_FOUND_RETRIES = 4
WAKE_TASK = "celery_durable.wake"


def _encode_payload(name: str, payload: Any) -> str:
    return serialization.encode_json(f"the payload of signal {name!r}", payload)


def _check_signal(workflow_id: str, name: str, idempotency_key: str | None) -> None:
    """What a producer passes, checked before anything is stored or published."""
    validate.check_workflow_id(workflow_id)
    check_signal_name(name)
    validate.check_idempotency_key(idempotency_key)


def store_signal(
    durable: Durable,
    workflow_id: str,
    name: str,
    payload_json: str,
    idempotency_key: str | None,
) -> bool:
    """Store a signal; True if stored, False for a repeated idempotency key."""
    config = durable.config
    stored = durable.store.insert_signal(
        workflow_id, name, payload_json, idempotency_key, config.max_pending_signals
    )
    if stored.outcome is Outcome.STORED:
        return True
    if stored.outcome is Outcome.DUPLICATE:
        return False
    if stored.outcome is Outcome.NOT_FOUND:
        raise WorkflowNotFound(workflow_id)
    if stored.outcome is Outcome.FULL:
        raise PendingSignalsFull(
            f"workflow run {workflow_id!r} already holds {config.max_pending_signals} "
            f"unconsumed signals (durable_max_pending_signals); signal {name!r} refused"
        )
    raise WorkflowAlreadyCompleted(workflow_id, stored.status or "finished")


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
    _check_signal(workflow_id, name, idempotency_key)
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
    _check_signal(workflow_id, name, idempotency_key)
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
        durable = durable_for(app, namespace)
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
        return wake(durable_for(app, namespace), workflow_id, name)


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


class SignalQueue(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: every worker consumes its app's signal queues on top of ``-Q``.

    The queues are added to the worker's selection before the consumer starts, so they
    are consumed like any ``-Q`` queue. (Adding them from a consumer bootstep, with
    ``consumer.add_task_queue``, starts consuming before the event loop has set the
    message callback: on RabbitMQ a backlog then crashes the worker.)
    """

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        queues = worker.app.amqp.queues
        for name in dict.fromkeys(d.config.signal_queue for d in durables_of(worker.app)):
            if name in queues:
                queues.select_add(queues[name])
            else:
                queues.select_add(name, exchange=name, exchange_type="direct", routing_key=name)
            logger.info("consuming the signal queue %r", name)
