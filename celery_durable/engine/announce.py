"""Which workflows the running workers announce, per namespace: each worker answers the
``durable_workflows`` inspect command (``celery -A app inspect durable_workflows``) with
the workflows every Durable of its app registered. A run of a workflow none of them
announces waits PENDING: ``durable show`` and the dashboard say so.

A worker that receives a run's message without having registered its workflow (Celery
logs "Received unregistered task" and discards it) makes the run due at once, so that a
worker that does register it publishes it at its next sweep (at its start, if none runs
yet) instead of after the dispatch grace.

Example::

    announced_workflows(app, "default")     # {"shop.checkout", ...}; None: unknown
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import Celery
from celery.worker.control import inspect_command

from celery_durable.core.logs import run_fields
from celery_durable.engine.apps import runtimes_of
from celery_durable.engine.publish import STORED_HEADER
from celery_durable.engine.queues import INSPECT_TIMEOUT, INSPECT_WAIT

logger = logging.getLogger("celery_durable.worker")

COMMAND = "durable_workflows"
UNANNOUNCED = "no worker has announced this workflow yet"
# The names already warned about by this worker: one line each, not one per message.
_warned: set[tuple[str, str]] = set()
# The last answer per (app, namespace), and when it came.
_answers: dict[tuple[int, str], tuple[float, set[str]]] = {}


@inspect_command(name=COMMAND)  # type: ignore[misc]
def durable_workflows(state: Any) -> dict[str, list[str]]:
    """The workflows this worker registered, by the namespace of their Durable."""
    return {rt.config.namespace: sorted(rt.workflows) for rt in runtimes_of(state.app)}


class _Asking(threading.Thread):
    def __init__(self, app: Celery) -> None:
        super().__init__(name="celery_durable-announced", daemon=True)
        self.app = app
        self.replies: list[dict[str, Any]] | None = None

    def run(self) -> None:
        try:
            self.replies = self.app.control.broadcast(COMMAND, reply=True, timeout=INSPECT_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - unknown, never fatal
            logger.debug("inspect %s failed: %r", COMMAND, exc)


def announced_workflows(
    app: Celery, namespace: str, max_age: float = 0.0, wait: float = INSPECT_WAIT
) -> set[str] | None:
    """The workflows the running workers of ``namespace`` registered (empty when none
    replied); None when the broadcast failed or took longer than ``wait`` (unknown).
    ``max_age``: an answer this recent is given again without asking (a page that
    refreshes every few seconds must not wait a second for a broadcast each time)."""
    key = (id(app), namespace)
    known = _answers.get(key)
    if known is not None and time.monotonic() - known[0] < max_age:
        return known[1]
    asking = _Asking(app)
    asking.start()
    asking.join(wait)
    if asking.is_alive() or asking.replies is None:
        return None
    names: set[str] = set()
    for reply in asking.replies:
        for answer in reply.values():
            if isinstance(answer, dict) and isinstance(answer.get(namespace), list):
                names.update(str(name) for name in answer[namespace])
    _answers[key] = (time.monotonic(), names)
    return names


def on_unknown_task(sender: Any = None, name: str = "", id: str = "", **kwargs: Any) -> None:  # noqa: A002 - Celery's argument
    """Celery's ``task_unknown`` signal, in the worker that discarded the message: a
    stored run's message makes the run due now, and the worker says so once per
    workflow."""
    message = kwargs.get("message")
    headers = getattr(message, "headers", None) or {}
    if not headers.get(STORED_HEADER) or sender is None:
        return  # not a run's message (one sent by name has no run yet)
    for runtime in runtimes_of(sender.app):
        try:
            made_due = runtime.store.make_undelivered_run_due(id, name)
        except Exception:  # noqa: BLE001 - the dispatch grace still brings it back
            logger.warning("run %s: could not make it due again", id, exc_info=True)
            continue
        namespace = runtime.config.namespace
        if made_due and (namespace, name) not in _warned:
            _warned.add((namespace, name))
            logger.warning(
                "workflow %s run %s was delivered to this worker, which has not registered "
                "the workflow (Celery discarded the message); the run stays PENDING in "
                "namespace %r until a worker that registers it takes it, at once",
                name,
                id,
                namespace,
                extra=run_fields(id, name),
            )
