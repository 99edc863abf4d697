"""Signals: stored in the database, their wake-ups carried by a dedicated Celery queue.

Every worker consumes ``durable_signal_queue`` (default ``celery_durable.signals``) on top
of its ``-Q`` queues; nothing to configure. The body's side is
``celery_durable.wait_for_signal``.

Example::

    handle.signal("approval", {"by": "alice"}, idempotency_key="approve-b-1")
    durable.send_signal("wf-id", "approval", {"by": "bob"})   # producers with a broker only
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps

from celery_durable.core import serialization, tracing, validate
from celery_durable.core.ids import SIGNAL_TASK, WAKE_TASK
from celery_durable.core.logs import log_malformed, run_fields
from celery_durable.core.retry import backoff
from celery_durable.engine.apps import runtime_for, runtimes_of
from celery_durable.engine.publish import publish_or_leave
from celery_durable.errors import PendingSignalsFull, WorkflowAlreadyCompleted, WorkflowNotFound
from celery_durable.store import Outcome, is_unreachable
from celery_durable.waits.store_area import WAITS
from celery_durable.waits.suspend import check_signal_name
from celery_durable.waits.wake import wake, wake_outcome

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.signals")

_MAX_RETRY_DELAY = 10.0
# A broker-only signal for a run not (yet) in the store is retried 0.25+0.5+1+2 s later.
NOT_FOUND_RETRIES = 4


def _encode_payload(runtime: RuntimeView, name: str, payload: Any) -> str:
    config = runtime.config
    return serialization.encode_json(
        f"the payload of signal {name!r}",
        payload,
        config.max_payload_bytes,
        config.max_payload_depth,
    )


def _check_signal(run_id: str, name: str, idempotency_key: str | None) -> None:
    """What a producer passes, checked before anything is stored or published."""
    validate.check_run_id(run_id)
    check_signal_name(name)
    validate.check_idempotency_key(idempotency_key)


def store_signal(
    runtime: RuntimeView,
    run_id: str,
    name: str,
    payload_json: str,
    idempotency_key: str | None,
) -> bool:
    """Store a signal; True if stored, False for a repeated idempotency key."""
    config = runtime.config
    stored = WAITS.of(runtime.store).insert_signal(
        run_id, name, payload_json, idempotency_key, config.max_pending_signals
    )
    if stored.outcome is Outcome.STORED:
        return True
    if stored.outcome is Outcome.DUPLICATE:
        return False
    if stored.outcome is Outcome.NOT_FOUND:
        raise WorkflowNotFound(run_id)
    if stored.outcome is Outcome.FULL:
        raise PendingSignalsFull(
            f"workflow run {run_id!r} already holds {config.max_pending_signals} "
            f"unconsumed signals (durable_max_pending_signals); signal {name!r} refused"
        )
    raise WorkflowAlreadyCompleted(run_id, stored.status or "finished")


def send_signal(
    runtime: RuntimeView,
    run_id: str,
    name: str,
    payload: Any = None,
    idempotency_key: str | None = None,
) -> bool:
    """Store the signal (before returning), then publish its wake-up on the signal queue.

    Returns False when ``idempotency_key`` was seen before for this run (a no-op).
    """
    _check_signal(run_id, name, idempotency_key)
    encoded = _encode_payload(runtime, name, payload)
    if not store_signal(runtime, run_id, name, encoded, idempotency_key):
        return False
    # Stored: the sweeper wakes the run if it waits for this signal.
    publish_or_leave(
        lambda: publish_wake(runtime, run_id, name),
        logger,
        "the wake-up of workflow %s",
        run_id,
        fields=run_fields(run_id),
        then="the sweeper will wake it",
    )
    return True


def publish_wake(runtime: RuntimeView, run_id: str, name: str) -> None:
    _publish(runtime, WAKE_TASK, (runtime.config.namespace, run_id, name))


def _publish(runtime: RuntimeView, task_name: str, args: tuple[Any, ...], **options: Any) -> None:
    # Through the registered task rather than send_task: task_always_eager then runs the
    # whole signal path in-process, which makes eager mode a complete test harness.
    tracing.add_link_headers(options)  # the run it wakes links back to the sender
    runtime.app.tasks[task_name].apply_async(args, queue=runtime.config.signal_queue, **options)


def send_signal_via_broker(
    runtime: RuntimeView,
    run_id: str,
    name: str,
    payload: Any = None,
    idempotency_key: str | None = None,
    *,
    store_first: bool = True,
) -> str:
    """Signal a run from a producer that may have only the broker.

    With ``store_first`` and a configured database, the signal is stored here and now
    (the broker then carries only the wake-up, which the sweeper replaces if it is lost);
    when the database can't be reached, the signal travels in a message for a worker to
    store. Without ``idempotency_key`` the message id is used, so a redelivered message
    is stored once. A run the store says doesn't exist raises WorkflowNotFound, as
    ``handle.signal`` does; a signal the store refuses otherwise (finished run, too many
    pending) is logged and kept with the reason, as is one for a missing run that went
    through the broker. Returns the message id.
    """
    _check_signal(run_id, name, idempotency_key)
    encoded = _encode_payload(runtime, name, payload)
    message_id = str(uuid.uuid4())
    key = idempotency_key or f"message:{message_id}"
    if store_first and _store_signal_here(runtime, run_id, name, encoded, key):
        return message_id
    args = (runtime.config.namespace, run_id, name, encoded, key)
    _publish(runtime, SIGNAL_TASK, args, task_id=message_id)
    return message_id


def _store_signal_here(
    runtime: RuntimeView, run_id: str, name: str, encoded: str, key: str
) -> bool:
    """Store (or refuse and keep) the signal directly; False: send it through the broker.
    WorkflowNotFound is raised to the sender, who can act on it (a run started in a
    transaction that hasn't committed isn't visible yet either: signal after the commit)."""
    fields = {**run_fields(run_id), "signal": name}
    try:
        stored = store_signal(runtime, run_id, name, encoded, key)
    except WorkflowNotFound:
        raise
    except (WorkflowAlreadyCompleted, PendingSignalsFull) as exc:
        _refuse(runtime, run_id, name, encoded, key, exc, fields)
        return True
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        logger.warning(
            "the store is unreachable (%s); signal %r for workflow %s goes through the broker",
            exc,
            name,
            run_id,
            extra=fields,
        )
        return False
    if stored:
        try:
            publish_wake(runtime, run_id, name)
        except Exception:
            logger.exception("publishing a wake-up failed; the sweeper wakes the run")
    return True


def malformed_signal(
    namespace: Any, run_id: Any, name: Any, payload_json: Any, idempotency_key: Any
) -> str | None:
    """Why a signal message off the broker can't be stored as data, or None if it can."""
    for label, value, limit in (
        ("namespace", namespace, 200),
        ("run id", run_id, 255),
        ("signal name", name, 200),
    ):
        problem = _text_problem(value, limit)
        if problem:
            return f"the {label} {problem}"
    if idempotency_key is not None:
        problem = _text_problem(idempotency_key, 255)
        if problem:
            return f"the idempotency key {problem}"
    if not isinstance(payload_json, str):
        return f"the payload is {type(payload_json).__name__}, not JSON text"
    try:
        serialization.loads(payload_json)
        payload_json.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        return f"the payload is not valid JSON text ({exc})"
    return None


def _text_problem(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if "\x00" in value:
        return "contains a NUL character"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    if len(value) > limit or size > 255:
        return f"is longer than {limit} characters (or 255 bytes)"
    return None


def register_tasks(app: Celery) -> None:
    """The two tasks of the signal queue, once per app; they find the Durable by namespace."""
    if SIGNAL_TASK in app._tasks:  # noqa: SLF001 - .tasks would finalize the app
        return

    @app.task(
        name=SIGNAL_TASK,
        shared=False,
        lazy=False,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        bind=True,
        max_retries=None,  # the database may be down for a while: the signal waits
        typing=False,  # a malformed message is logged and kept, not a TypeError
    )
    def receive_signal(task: Any, *args: Any, **kwargs: Any) -> bool:
        # Any arguments: a message that doesn't fit is refused by name, not a TypeError.
        shape = validate.arguments_problem(
            args, kwargs, _SIGNAL_ARGUMENTS, range(4, 6), frozenset({"not_found_tries"})
        )
        not_found_tries = kwargs.get("not_found_tries", 0)
        if shape is None and (type(not_found_tries) is not int or not_found_tries < 0):
            shape = f"its not_found_tries={validate.show(not_found_tries)} is not a count"
        if shape is not None:
            _drop_malformed(app, task.request.id, None, None, None, None, shape)
            return False
        namespace, run_id, name, payload_json, idempotency_key = (*args, None)[:5]
        problem = malformed_signal(namespace, run_id, name, payload_json, idempotency_key)
        runtime = None if problem else _durable_or_none(app, namespace)
        if runtime is None:
            problem = problem or f"no Durable serves the namespace {namespace!r} here"
            message = (namespace, run_id, name, payload_json)
            _drop_malformed(app, task.request.id, *message, problem)
            return False
        limit = runtime.config.max_payload_bytes
        size = serialization.payload_size(payload_json, limit)
        if size is not None:
            # Never kept, not even as a refused signal: it is stored nowhere.
            problem = (
                f"the payload is {size} bytes of JSON, over the limit of {limit} bytes "
                f"({serialization.MAX_PAYLOAD_SETTING})"
            )
            _drop_malformed(app, task.request.id, None, run_id, name, None, problem)
            return False
        deep = serialization.json_depth_problem(payload_json, runtime.config.max_payload_depth)
        if deep is not None:
            _drop_malformed(
                app, task.request.id, None, run_id, name, None, f"the payload is {deep}"
            )
            return False
        fields = {**run_fields(run_id), "signal": name}
        try:
            try:
                stored = store_signal(runtime, run_id, name, payload_json, idempotency_key)
            except WorkflowNotFound as exc:
                # The run may not be committed yet (a transactional start): look again.
                if not_found_tries < NOT_FOUND_RETRIES:
                    raise task.retry(
                        countdown=0.25 * 2**not_found_tries,
                        kwargs={"not_found_tries": not_found_tries + 1},
                        exc=exc,
                    ) from exc
                _refuse(runtime, run_id, name, payload_json, idempotency_key, exc, fields)
                return False
            except (WorkflowAlreadyCompleted, PendingSignalsFull) as exc:
                _refuse(runtime, run_id, name, payload_json, idempotency_key, exc, fields)
                return False
            if stored:
                with tracing.linked(task.request):
                    wake(runtime, run_id, name)
            return stored
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            # Never acknowledged as lost: the message comes back once the store is up.
            delay = backoff(0.5, task.request.retries, _MAX_RETRY_DELAY)
            logger.warning(
                "signal %r for workflow %s: the store is unreachable (%s); retrying in %.1fs",
                name,
                run_id,
                exc,
                delay,
                extra=fields,
            )
            raise task.retry(countdown=delay, exc=exc) from exc

    @app.task(
        name=WAKE_TASK, shared=False, lazy=False, acks_late=True, ignore_result=True, typing=False
    )
    def wake_task(*args: Any, **kwargs: Any) -> str:
        runtime = _wake_target(app, wake_task.request.id, args, kwargs)
        if runtime is None:
            return "refused: a malformed wake-up message (logged)"
        # If this fails (store down), the signal is stored: the sweeper wakes the run.
        with tracing.linked(wake_task.request):
            return wake_outcome(runtime, args[1], args[2])


_SIGNAL_ARGUMENTS = "(namespace, run id, signal name, payload JSON[, idempotency key])"


def _wake_target(app: Celery, message_id: Any, args: Any, kwargs: Any) -> RuntimeView | None:
    """The Durable a wake-up message is for; None (refused by name, logged once) when its
    arguments don't fit, can't be ids, or name a namespace no Durable here serves."""
    problem = validate.arguments_problem(
        args, kwargs, "(namespace, run id, signal name)", range(3, 4)
    )
    labels = (("namespace", 200), ("run id", 255), ("signal name", 200))
    for (label, limit), value in zip(labels, args if problem is None else (), strict=False):
        text = _text_problem(value, limit)
        if text is not None:
            problem = f"the {label} {text}"
            break
    runtime = None if problem else _durable_or_none(app, args[0])
    if runtime is None:
        problem = problem or f"no Durable serves the namespace {args[0]!r} here"
        run_id = repr(args[1])[:255] if len(args) > 1 else None
        log_malformed(logger, "wake", message_id, problem, extra=run_fields(run_id))
    return runtime


def _durable_or_none(app: Celery, namespace: str) -> RuntimeView | None:
    try:
        return runtime_for(app, namespace)
    except LookupError:
        return None


def _storable(text: Any) -> bool:
    """Text the database takes as it is (the payload column): a str, UTF-8, no NUL."""
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse(
    runtime: RuntimeView,
    run_id: str,
    name: str,
    payload_json: str,
    idempotency_key: str | None,
    exc: Exception,
    fields: dict[str, Any],
) -> None:
    """Keep a signal the store refused, with the reason, and log it. Not kept when its run
    does not exist, or already holds durable_max_pending_signals refused signals."""
    kept = WAITS.of(runtime.store).reject_signal(
        run_id,
        name,
        payload_json,
        idempotency_key,
        f"{type(exc).__name__}: {exc}",
        runtime.config.max_pending_signals,
    )
    cap = f"it holds durable_max_pending_signals={runtime.config.max_pending_signals} already"
    why = "no such run" if isinstance(exc, WorkflowNotFound) else cap
    outcome = "refused and kept" if kept else f"refused, not kept ({why})"
    logger.error("signal %r for workflow %s %s: %s", name, run_id, outcome, exc, extra=fields)


def _drop_malformed(
    app: Celery,
    message_id: Any,
    namespace: Any,
    run_id: Any,
    name: Any,
    payload: Any,
    problem: str,
) -> None:
    """Log a malformed signal message once; keep it, with the reason, when its run and
    name can be stored at all, and never as data a workflow could consume."""
    fields = {**run_fields(repr(run_id)[:255]), "signal": repr(name)[:255]}
    runtime = _durable_or_none(app, namespace) if isinstance(namespace, str) else None
    keepable = (
        runtime is not None
        and _text_problem(run_id, 255) is None
        and isinstance(payload, str)
        and _text_problem(payload or "x", 10**9)
        in (None, f"is longer than {10**9} characters (or 255 bytes)")
    )
    kept = False
    if keepable and runtime is not None:
        # Kept as text, never parsed: its size is all the payload limit can judge.
        size, limit = len(payload.encode("utf-8")), runtime.config.max_payload_bytes
        if size > limit:
            setting = serialization.MAX_PAYLOAD_SETTING
            problem = f"{problem}; its {size} bytes are over {limit} ({setting})"
        label = name if _text_problem(name, 200) is None else repr(name)[:200]
        try:
            reason, cap = f"malformed: {problem}", runtime.config.max_pending_signals
            kept = size <= limit and WAITS.of(runtime.store).reject_signal(
                run_id, label, payload, None, reason, cap
            )
        except Exception:  # noqa: BLE001 - it is logged below either way
            logger.exception("keeping a malformed signal failed")
    outcome = "kept in the signals table with the reason" if kept else "acknowledged and dropped"
    what = problem if name is None else f"(signal {fields['signal']}) {problem}"
    log_malformed(logger, "signal", message_id, what, outcome, fields)


class SignalQueue(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: every worker consumes its app's signal queues on top of ``-Q``.

    The queues are added to the worker's selection before the consumer starts, so they
    are consumed like any ``-Q`` queue. (Adding them from a consumer bootstep, with
    ``consumer.add_task_queue``, starts consuming before the event loop has set the
    message callback: on RabbitMQ a backlog then crashes the worker.)
    """

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        queues = worker.app.amqp.queues
        for name in dict.fromkeys(d.config.signal_queue for d in runtimes_of(worker.app)):
            if name in queues:
                queues.select_add(queues[name])
            else:
                queues.select_add(name, exchange=name, exchange_type="direct", routing_key=name)
            logger.info("consuming the signal queue %r", name)
