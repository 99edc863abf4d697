"""What the worker's main process lets through to its pool, from the library's own tasks
(workflows, steps' item tasks, the signal and wake-up tasks) and its signal queues.

The main process reads each of these messages before any task code could, and:

- takes JSON only. A message of another content type (pickle above all: reading it runs
  code) is refused unread, logged once and acknowledged, even when the app's
  ``accept_content`` allows it. A worker whose app accepts pickle says so at start.
- refuses arguments nested deeper than ``durable_max_payload_depth``. The prefork pool
  pickles each delivery's arguments in the main process, where a ``RecursionError``
  ends the whole worker, and the message, put back, ends the next one. A workflow's
  delivery goes on without its arguments, telling the delivery why
  (``ARGUMENTS_REFUSED``): a run started by name is stored FAILED with that error, a
  stored run runs from its stored arguments. Any other is logged once and acknowledged.

Example::

    app.steps["consumer"].add(DeliveryGuard)   # done by Durable(app)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, bootsteps
from kombu.serialization import dumps, loads

from celery_durable.core import serialization
from celery_durable.core.ids import SIGNAL_TASK, WAKE_TASK
from celery_durable.core.validate import show
from celery_durable.engine.apps import runtimes_of

logger = logging.getLogger("celery_durable.worker")

JSON = "application/json"
# The header a workflow's delivery carries when the main process took its arguments out.
ARGUMENTS_REFUSED = "durable_arguments_refused"
_PICKLE = {"pickle", "application/x-python-serialize"}

Handler = Callable[[Any], Any]


def warn_if_pickle_accepted(app: Celery) -> bool:
    """Warn once (at worker start) when the app's ``accept_content`` takes pickle."""
    accepted = {str(kind).lower() for kind in app.conf.accept_content or ()}
    if not accepted & _PICKLE:
        return False
    logger.warning(
        "accept_content includes pickle: a pickled message runs code as it is read. "
        "celery_durable's own tasks and signal queues take JSON only and refuse any other "
        "message unread; the app's other tasks still read pickle (drop it from "
        "accept_content unless every producer is trusted)"
    )
    return True


class Guard:
    """Checks one message of the library's tasks or signal queues (see the module)."""

    def __init__(self, app: Celery, connection_errors: tuple[type[BaseException], ...]) -> None:
        self.app = app
        self.connection_errors = connection_errors
        self._known: tuple[dict[str, int], set[str], int] | None = None

    def known(self) -> tuple[dict[str, int], set[str], int]:
        """(the depth limit of each library task by name, the signal queues, the largest
        limit): read on the first message, once every Durable has registered its tasks."""
        if self._known is None:
            runtimes = runtimes_of(self.app)
            widest = max((r.config.max_payload_depth for r in runtimes), default=0)
            limits = dict.fromkeys((SIGNAL_TASK, WAKE_TASK), widest)
            for runtime in runtimes:
                for name in runtime.steps:
                    limits[name] = widest
                for name in runtime.workflows:
                    limits[name] = runtime.config.max_payload_depth
            queues = {runtime.config.signal_queue for runtime in runtimes}
            self._known = (limits, queues, widest)
        return self._known

    def wrap(self, handler: Handler) -> Handler:
        def on_task_received(message: Any) -> Any:
            if self.passes(message):
                return handler(message)
            return None

        return on_task_received

    def passes(self, message: Any) -> bool:
        """True: hand the message on to Celery; False: it was refused and acknowledged."""
        limits, queues, widest = self.known()
        headers = message.headers if isinstance(message.headers, dict) else {}
        name = headers.get("task")
        queue = (message.delivery_info or {}).get("routing_key")
        if name not in limits and queue not in queues:
            return True  # neither our task nor our queue: the app's own business
        if message.content_type != JSON:
            self.refuse(
                message,
                name,
                f"its content type is {show(message.content_type)}, and celery_durable's "
                "tasks and queues take JSON only; it was not read",
            )
            return False
        limit = limits.get(str(name), widest)
        if not serialization.may_nest_deeper(message.body or b"", limit):
            return True
        problem, embed = _arguments_problem(message, limit)
        if problem is None:
            return True
        if name in self._workflows() and "id" in headers:
            # A workflow's delivery goes on, without the arguments: see the module. (The
            # delivery logs the refusal of a run started by name.)
            message.body = dumps([[], {}, embed or {}], serializer="json")[2].encode()
            headers[ARGUMENTS_REFUSED] = problem
            return True
        self.refuse(message, name, problem)
        return False

    def _workflows(self) -> set[str]:
        return {name for r in runtimes_of(self.app) for name in r.workflows}

    def refuse(self, message: Any, name: Any, problem: str) -> None:
        headers = message.headers if isinstance(message.headers, dict) else {}
        message_id = headers.get("id") or (message.properties or {}).get("correlation_id")
        queue = (message.delivery_info or {}).get("routing_key")
        logger.error(
            "refused message %s (task %s, queue %s) before the pool: %s; acknowledged, not run",
            show(message_id),
            show(name),
            show(queue),
            problem,
        )
        message.ack_log_error(logger, self.connection_errors)


def _arguments_problem(message: Any, limit: int) -> tuple[str | None, Any]:
    """(why the message's arguments nest too deeply, or None; its canvas, if read)."""
    try:
        payload = loads(message.body, JSON, message.content_encoding or "utf-8", accept={JSON})
    except Exception:  # noqa: BLE001 - kombu's DecodeError, a RecursionError inside
        return (
            "its arguments can't be read as JSON (nested too deeply?), over the limit of "
            f"{limit} ({serialization.MAX_DEPTH_SETTING})",
            None,
        )
    if isinstance(payload, dict):  # Celery's protocol 1
        args, kwargs, embed = payload.get("args"), payload.get("kwargs"), None
    elif isinstance(payload, list | tuple) and len(payload) == 3:
        args, kwargs, embed = payload
    else:
        return None, None  # not a task's arguments: Celery refuses it by name
    labelled = list(enumerate(args)) if isinstance(args, list | tuple) else []
    labelled += list(kwargs.items()) if isinstance(kwargs, dict) else []
    for label, value in labelled:
        problem = serialization.depth_problem(value, limit)
        if problem is not None:
            named = f"#{label}" if isinstance(label, int) else repr(label)
            return f"argument {named} is {problem}", embed
    return None, embed


class DeliveryGuard(bootsteps.Step):  # type: ignore[misc]
    """A consumer bootstep: every message the worker receives passes the Guard first, in
    the main process, before Celery reads it (it wraps ``create_task_handler``, which
    the worker's event loop calls to get its message callback)."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        guard = Guard(parent.app, tuple(getattr(parent, "connection_errors", ()) or ()))
        create = parent.create_task_handler

        def create_task_handler(*args: Any, **options: Any) -> Handler:
            return guard.wrap(create(*args, **options))

        parent.create_task_handler = create_task_handler
        warn_if_pickle_accepted(parent.app)
