"""Which workflows the running workers announce, per namespace: each worker answers the
``durable_workflows`` inspect command (``celery -A app inspect durable_workflows``) with
the workflows every Durable of its app registered. A run of a workflow none of them
announces waits PENDING: ``durable show`` and the dashboard say so.

A worker that receives a run's message without having registered its workflow (Celery
logs "Received unregistered task" and discards it) counts that as a dispatch nobody
claimed and says so once per workflow. A worker that registers the workflow makes such
runs due as it starts, so its first sweep publishes them instead of waiting out their
backoff.

Example::

    announced_workflows(app, "default")     # {"shop.checkout", ...}; None: unknown
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.worker.control import inspect_command

from celery_durable.core.logs import run_fields
from celery_durable.engine.apps import runtimes_of
from celery_durable.engine.publish import STORED_HEADER
from celery_durable.engine.queues import INSPECT_TIMEOUT, INSPECT_WAIT

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

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
            counted = runtime.store.count_discarded_run(id, name)
        except Exception:  # noqa: BLE001 - the sweeper's backoff still brings it back
            logger.warning("run %s: could not count its discarded delivery", id, exc_info=True)
            continue
        namespace = runtime.config.namespace
        if counted and (namespace, name) not in _warned:
            _warned.add((namespace, name))
            logger.warning(
                "workflow %s run %s was delivered to this worker, which has not registered "
                "the workflow (Celery discarded the message); the run stays PENDING in "
                "namespace %r until a worker that registers it starts and takes it",
                name,
                id,
                namespace,
                extra=run_fields(id, name),
            )


def take_unclaimed_runs(runtime: RuntimeView) -> None:
    """At a worker's start: the runs of its workflows that were published and not claimed
    are due now, for its first sweep (a worker without them may have discarded them)."""
    try:
        made_due = runtime.store.make_unclaimed_runs_due(sorted(runtime.workflows))
    except Exception:  # noqa: BLE001 - no tables yet, an outage: the sweeper says which
        logger.debug("making unclaimed runs due at start failed", exc_info=True)
        return
    if made_due:
        logger.info(
            "celery_durable: %d published and unclaimed run(s) of this worker's workflows "
            "are due now (namespace %r)",
            made_due,
            runtime.config.namespace,
        )
