"""What Celery's monitors (Flower, ``celery events``) show of a workflow's deliveries.

A run is one Celery task id, delivered once per start, wake-up, retry or recovery; Flower
shows it as one task. A delivery that neither returns the run's result nor raises its
failure ends with ``DeliveryEnded`` (Celery's ``Ignore``), so Celery sends no
``task-succeeded`` for it; the delivery sends instead a task event of its own, which
Flower and ``celery events`` show as a state (ranked above STARTED, below SUCCESS and
FAILURE, so Celery's final states still win):

=========== ================== =========================================================
state       event              sent when
=========== ================== =========================================================
WAITING     ``task-waiting``   the run suspended (signal, timer, items, a child); also
                               restated by a duplicate delivery that found it waiting
RESUMED     ``task-resumed``   a delivery picked the run up again after a wait; again
                               as each step it runs starts (the line names that step)
CANCELLED   ``task-cancelled`` the run was cancelled while a delivery held it (an item:
                               its run was cancelled before it ran)
SCHEDULED   ``task-scheduled`` a delivery came before the run was due (countdown,
                               retry backoff) and did not run it
FAILING     ``task-failing``   just before Celery's FAILURE, to carry the run's line
=========== ================== =========================================================

Every one of them, and Celery's SUCCESS and RETRY, carries the run's line in the
``result`` field, which Flower displays and searches: ``[workflow=order-42 attempt=2
step=3 (shop.charge)]``. Events are sent only when the worker sends task events (``-E``,
``worker_send_task_events``, or Flower's "enable events"): ``WorkflowRequest``, in the
worker's main process, tells each delivery whether they are on.

Item tasks (``cd.map``, ``step.start``, routed steps) report the same way, their line naming
the item (``item=K``): SUCCESS with the step's value, RETRY while the item waits out its
backoff, FAILURE with the step's exception once it failed for good, CANCELLED.

Example::

    raise ended(durable.app, ctx.run_id, WAITING, "waiting for signal 'approval'")
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from billiard.einfo import ExceptionWithTraceback
from celery.app.task import Context
from celery.exceptions import Ignore
from celery.utils.saferepr import saferepr
from celery.worker.request import Request
from kombu.utils.encoding import safe_repr, safe_str
from kombu.utils.objects import cached_property

from celery_durable.core import tracing
from celery_durable.core.logs import describe_wait, iso_time
from celery_durable.core.redact import redactor_of
from celery_durable.store.engine_names import UPDATE_STEP_PREFIX

if TYPE_CHECKING:
    from celery import Celery

    from celery_durable.body.context import WorkflowContext
    from celery_durable.store import RunRecord

logger = logging.getLogger("celery_durable.taskevents")

WAITING = "task-waiting"
RESUMED = "task-resumed"
CANCELLED = "task-cancelled"
SCHEDULED = "task-scheduled"
FAILING = "task-failing"
RETRIED = "task-retried"  # Celery's own: the delivery is published again later

# What a delivery that ended so did, on its trace span (celery_durable.outcome).
_OUTCOMES = {WAITING: "waiting", CANCELLED: "cancelled", RETRIED: "redelivered"}

# The request-dict key by which the worker's main process tells a delivery (in its pool
# process) whether task events are on: only the main process knows (-E can be switched on
# at run time by `celery control enable_events`, which Flower sends).
EVENTS_ON = "durable_task_events"


class DeliveryEnded(Ignore):  # type: ignore[misc]
    """The delivery ends without a result for Celery: the run waits, was cancelled, or is
    another delivery's. Celery acknowledges it and reports no SUCCESS (``Ignore``)."""

    def __init__(self, text: str, event: str | None = None) -> None:
        # Both in args: the exception is pickled from the pool process to the main one.
        super().__init__(text, event)
        self.text = text
        self.event = event

    def __str__(self) -> str:
        return self.text


class RunFailed(Exception):  # noqa: N818 - what Celery's FAILURE shows
    """The run failed for good with a BaseException (a child's WorkflowCancelled) that
    must not reach the pool: Celery reports this instead, as the task's FAILURE."""


class Finished:
    """A finished delivery's value as Celery gets it while task events are on: Flower's
    ``result`` then shows the value and the run's line. Nothing else reads it: workflow
    tasks store no Celery result (``handle.get()`` reads the store)."""

    __slots__ = ("line", "value")

    def __init__(self, value: Any, line: str) -> None:
        self.value = value
        self.line = line

    def __repr__(self) -> str:
        return f"{saferepr(self.value)} {self.line}"


def run_line(
    run_id: str,
    attempt: int,
    step: int | None = None,
    step_name: str | None = None,
    steps: int | None = None,
    item: int | None = None,
) -> str:
    """``[workflow=ID attempt=N step=I (NAME)]``: where a run is, for Flower's result; an
    item task's line names its item too (``item=K``, ``attempt`` is the item's)."""
    parts = [f"run={run_id}", f"attempt={attempt}"]
    if step is not None:
        parts.append(f"step={step}" + (f" ({step_name})" if step_name else ""))
    if item is not None:
        parts.append(f"item={item}")
    if steps is not None:
        parts.append(f"steps={steps}")
    return "[" + " ".join(parts) + "]"


def ctx_line(ctx: WorkflowContext, step: int | None = None, step_name: str | None = None) -> str:
    """The line of the running delivery; ``step`` defaults to the next step's index."""
    return run_line(ctx.run_id, ctx.attempt, ctx.next_index if step is None else step, step_name)


def _delivery(app: Celery, task_id: str) -> Any:
    """The request of the worker delivery of task ``task_id`` (a run's id, or an item
    task's), if it sends events."""
    task = app.current_worker_task
    if task is None:
        return None
    request = task.request
    if request.id != task_id or not getattr(request, EVENTS_ON, False):
        return None
    return request


def emit(app: Celery, task_id: str, event: str, **fields: Any) -> None:
    """Send a task event for the delivery of ``task_id`` (from its pool process), if the
    worker sends task events; never fails the run."""
    request = _delivery(app, task_id)
    if request is None:
        return
    try:
        with app.events.default_dispatcher(hostname=request.hostname) as dispatcher:
            dispatcher.send(event, uuid=task_id, retry=False, **fields)
    except Exception:  # noqa: BLE001 - monitoring must never fail or stall a run
        logger.warning("could not send the %s event of task %s", event, task_id, exc_info=True)


def ended(app: Celery, task_id: str, event: str | None, text: str, **fields: Any) -> DeliveryEnded:
    """Send ``event`` (with ``text`` as its result) and return the DeliveryEnded to raise."""
    tracing.outcome(_OUTCOMES.get(event or "", "not_run"), text)
    if event is not None:
        emit(app, task_id, event, result=text, **fields)
    return DeliveryEnded(text, event)


def resumed(app: Celery, ctx: WorkflowContext) -> None:
    """A delivery claimed a run whose history ends in a wait: show it running again
    (STARTED ranks below WAITING, so Celery's own event can't), its line naming the step
    it is on: the one after its history now, then each step it starts (``ctx.on_step``)."""
    if _delivery(app, ctx.run_id) is None:
        return
    # A wait (signal, timer) or a fan-out (items, a child) the run was suspended on.
    waits = [step for step in ctx.history.values() if step.status in ("waiting", "started")]
    if not waits:
        return
    wait = min(waits, key=lambda step: step.idx)
    after = f"resumed after waiting at step {wait.idx} ({wait.name})"

    def running(step: int, name: str | None) -> None:
        emit(app, ctx.run_id, RESUMED, result=f"{after} {ctx_line(ctx, step, name)}")

    # Replay comes first: the step to run next is the one after the recorded ones; its
    # name is known once the body calls it.
    running(max(ctx.history) + 1, None)
    ctx.on_step = running


def finished(app: Celery, ctx: WorkflowContext, value: Any) -> Any:
    """What the delivery returns to Celery for a run that succeeded."""
    return finished_task(
        app, ctx.run_id, value, run_line(ctx.run_id, ctx.attempt, steps=ctx.next_index)
    )


def finished_task(app: Celery, task_id: str, value: Any, line: str) -> Any:
    """What a delivery (a run's or an item's) returns to Celery for a success: the value
    with its line while task events are on, else the value. Celery only shows it (the
    worker's "Task ... succeeded" line, Flower's result; the run's own is in the store),
    so it is masked by ``durable_redact``."""
    try:
        value = redactor_of(app.conf.get("durable_redact"))(value)
    except Exception as exc:  # noqa: BLE001 - the run is settled: only what is shown fails
        value = f"<not shown: durable_redact raised {type(exc).__name__}>"
    if _delivery(app, task_id) is None:
        return value
    return Finished(value, line)


def unclaimed(app: Celery, run_id: str, run: RunRecord | None) -> DeliveryEnded:
    """A delivery that could not claim its run (a duplicate, or early): it restates the
    run's status, never a success. A running run's own delivery reports for it."""
    if run is None:
        return DeliveryEnded(f"no run {run_id!r}: the message was dropped")
    # A suspension gives its attempt back: a run that ran shows at least attempt 1.
    line = run_line(run.id, max(run.attempts, 1 if run.started_at is not None else 0))
    note = f"this delivery found the run {run.status} and did not run it {line}"
    if run.status == "WAITING":
        signal, kind = run.wait_signal, "signal"
        if signal is not None and signal.startswith(UPDATE_STEP_PREFIX):
            signal, kind = signal.removeprefix(UPDATE_STEP_PREFIX), "update"
        waits = describe_wait(signal, run.due_at, kind)
        return ended(app, run_id, WAITING, f"{waits}; {note}")
    if run.status == "PENDING":
        due = "" if run.due_at is None else f" (due {iso_time(run.due_at)})"
        return ended(app, run_id, SCHEDULED, f"pending{due}; {note}")
    if run.status == "CANCELLED":
        return ended(app, run_id, CANCELLED, f"cancelled: {run.cancel_reason}; {note}")
    return DeliveryEnded(note)


class WorkflowRequest(Request):  # type: ignore[misc]
    """The worker's request class for workflow tasks (``WorkflowTask.Request``).

    It runs in the worker's main process, which alone knows whether task events are on:
    it passes that to the delivery in the request, and puts the run's line (the Retry's
    message) in the ``result`` of Celery's ``task-retried`` event.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        eventer = self._eventer
        self._request_dict[EVENTS_ON] = bool(
            eventer is not None
            and eventer.enabled
            and self.task.send_events
            and (not eventer.groups or "task" in eventer.groups)
        )

    @cached_property
    def _context(self) -> Context:
        # The failures this process reports itself (a hard time limit, a revoke) must not
        # fire a canvas that a message sent by name carried, nor store a state: the run
        # reports when it settles (engine.canvas).
        context = super()._context
        for key in ("callbacks", "errbacks", "chain", "chord"):
            setattr(context, key, None)
        context.ignore_result = True
        return context

    @property
    def store_errors(self) -> bool:
        return False

    def on_retry(self, exc_info: Any) -> None:
        # Celery's on_retry, plus the result field: the retry's message names the run.
        if self.task.acks_late:
            self.acknowledge()
        retry = exc_info.exception
        if isinstance(retry, ExceptionWithTraceback):
            retry = retry.exc
        self.send_event(
            RETRIED,
            exception=safe_repr(getattr(retry, "exc", None) or retry),
            traceback=safe_str(exc_info.traceback),
            result=safe_str(getattr(retry, "message", None) or safe_repr(retry)),
        )
