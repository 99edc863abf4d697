"""The body's side of updates: ``wait_for_update`` takes a request, ``req.reply`` or
``req.reject`` answers it. Each is a step of the run: a replay returns the recorded request
and skips the recorded answer, so the body is never asked twice.

The run suspends while it waits (WAITING, no worker held), as ``wait_for_signal`` does;
the caller's request wakes it. A validator registered with the workflow
(``@checkout.validator("add_item")``) runs here, in the worker, when the body takes the
request and before anything is recorded: a refused request leaves no step behind.

Example::

    @durable.workflow
    def cart(cart_id: str) -> list:
        items: list = []
        while len(items) < 10:
            req = cd.wait_for_update("add_item", timeout=3600)
            if req is None:
                break
            if req.payload["sku"] in items:
                req.reject("already in the cart")
            else:
                items.append(req.payload["sku"])
                req.reply(len(items))
        return items
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery_durable.body.context import WorkflowContext, enter_body
from celery_durable.body.event_loop import awaited_wait, in_async_body, returned
from celery_durable.body.replay import (
    check_replay,
    record,
    stop_writing,
    store_guard,
    write_caught_failure,
)
from celery_durable.core import faults, serialization, validate
from celery_durable.core.logs import describe_wait
from celery_durable.errors import Suspended
from celery_durable.store import Outcome, StepRecord
from celery_durable.store.engine_names import (
    UPDATE_REJECT_PREFIX,
    UPDATE_REPLY_PREFIX,
    UPDATE_STEP_PREFIX,
)
from celery_durable.updates.statements import ANSWERED, REJECTED
from celery_durable.updates.store_area import UPDATES

if TYPE_CHECKING:
    from celery_durable.engine.hooks import Delivery

logger = logging.getLogger("celery_durable.updates")

# Where a delivery keeps its workflow's validators (``Delivery.wings``, the run's context's).
VALIDATORS = "updates.validators"


def note_validators(delivery: Delivery) -> None:
    """A before-body hook: the run's context gets its workflow's validators."""
    delivery.wings[VALIDATORS] = delivery.definition.validators


class UpdateRequest:
    """A request the body took with ``wait_for_update``: its ``name`` and ``payload``;
    answer it once, with ``reply(value)`` or ``reject(reason)``."""

    def __init__(self, ctx: WorkflowContext, update_id: int, name: str, payload: Any) -> None:
        self._ctx = ctx
        self.id = update_id
        self.name = name
        self.payload = payload
        self.answered = False

    def __repr__(self) -> str:
        return f"<UpdateRequest {self.name!r} id={self.id}>"

    def reply(self, value: Any = None) -> None:
        """Answer the request with ``value`` (JSON): stored, with a step that records it,
        before the caller's ``handle.update`` returns it."""
        ctx = self._enter("reply")
        encoded = serialization.encode_json(
            f"the reply to update {self.name!r} of workflow run {ctx.run_id!r}",
            value,
            ctx.max_payload_bytes,
            ctx.max_payload_depth,
        )
        self._answer(ctx, UPDATE_REPLY_PREFIX, ANSWERED, encoded, encoded)

    def reject(self, reason: str) -> None:
        """Refuse the request: the caller's ``handle.update`` raises UpdateRejected with
        ``reason``. The rejection is a step of the run (a validator's refusal is not)."""
        ctx = self._enter("reject")
        validate.check_text(reason, "reject(reason)", max_chars=10_000)
        self._answer(ctx, UPDATE_REJECT_PREFIX, REJECTED, reason, serialization.dumps(reason))

    def _enter(self, verb: str) -> WorkflowContext:
        ctx = enter_body(f"UpdateRequest.{verb}()")
        if self.answered:
            raise RuntimeError(
                f"update {self.name!r} (request {self.id}) of workflow run {ctx.run_id!r} "
                "was answered already: reply() or reject() once per request"
            )
        return ctx

    def _answer(
        self, ctx: WorkflowContext, prefix: str, status: str, answer: str, output: str
    ) -> None:
        write_caught_failure(ctx)
        index = ctx.take_index()
        step_name, step_input = prefix + self.name, serialization.dumps({"update": self.id})
        recorded = ctx.history.get(index)
        self.answered = True
        if recorded is not None:  # answered before this replay: never again
            check_replay(ctx, index, recorded, step_name, step_input)
            return
        step = StepRecord(index, step_name, "ok", step_input, output, None, 0.0)
        with store_guard(ctx):
            outcome = UPDATES.of(ctx.store).answer_update(
                ctx.run_id, ctx.fence, self.id, status, answer, step, ctx.take_deferred()
            )
        if outcome is not Outcome.RECORDED:
            stop_writing(ctx)
        ctx.history[index] = step
        logger.debug(
            "workflow %s run %s: step %d %s update %r (request %d)",
            ctx.workflow_name,
            ctx.run_id,
            index,
            status,
            self.name,
            self.id,
            extra=ctx.log_fields(index),
        )


def wait_for_update(name: str, timeout: float | None = None, *, default: Any = None) -> Any:
    """Wait for the next update request ``name``; return it (an ``UpdateRequest``), or
    ``default`` (None unless given) after ``timeout`` s.

    The run is suspended while it waits (WAITING, no worker held). Requests of one name
    are taken in the order they were sent, each by one call; a request the workflow's
    validator refuses is answered (UpdateRejected) and the wait goes on. In an async
    workflow, await it: ``req = await cd.wait_for_update("add_item")``.
    """
    ctx = enter_body("celery_durable.wait_for_update()")
    validate.check_signal_name(name, "wait_for_update(name)")
    if timeout is not None and (timeout != timeout or timeout < 0):
        raise ValueError(f"wait_for_update(timeout) must be None or >= 0, got {timeout!r}")
    ctx.check_stopping()
    write_caught_failure(ctx)
    index = ctx.take_index()
    step_name = UPDATE_STEP_PREFIX + name
    if not in_async_body():
        return _wait_at(ctx, index, name, timeout, default)
    label = f"cd.wait_for_update({name!r}) (index {index})"
    recorded = ctx.history.get(index)
    if recorded is not None and recorded.status == "ok":
        check_replay(ctx, index, recorded, step_name, "[]")
        return returned(label, _taken(ctx, name, recorded.output, default))
    return awaited_wait(label, lambda: _wait_at(ctx, index, name, timeout, default))


def _taken(ctx: WorkflowContext, name: str, output: str | None, default: Any) -> Any:
    """What a finished wait returns: the request it recorded, or ``default`` (a timeout,
    no output)."""
    if output is None:
        return default
    taken = serialization.loads(output)
    return UpdateRequest(ctx, int(taken["id"]), name, taken["payload"])


def _wait_at(
    ctx: WorkflowContext, index: int, name: str, timeout: float | None, default: Any
) -> Any:
    ctx.check_stopping()
    store, area = ctx.store, UPDATES.of(ctx.store)
    step_name = UPDATE_STEP_PREFIX + name
    recorded = ctx.history.get(index)
    deadline = None
    if recorded is not None:
        check_replay(ctx, index, recorded, step_name, "[]")
        if recorded.status == "ok":
            return _taken(ctx, name, recorded.output, default)
        deadline = serialization.loads(recorded.output or "{}").get("deadline")
    elif timeout is not None:
        with store_guard(ctx):
            deadline = store.now() + max(0.0, timeout)
    while True:
        with store_guard(ctx):
            found = area.oldest_update(ctx.run_id, name)
        if found is not None:
            request = _receive(ctx, index, name, *found)
            if request is not None:
                return request
            continue  # refused by the validator: the next request, or wait
        with store_guard(ctx):
            due = deadline is not None and store.now() >= deadline
        if due:
            # No output: replay tells a timeout from a request (always an object).
            timed_out = StepRecord(index, step_name, "ok", "[]", None, None, 0.0)
            record(ctx, timed_out)
            return default
        waiting = StepRecord(
            index, step_name, "waiting", "[]", serialization.dumps({"deadline": deadline}), None
        )
        with store_guard(ctx):
            outcome = area.suspend_for_update(
                ctx.run_id, ctx.fence, waiting, name, step_name, deadline, ctx.take_deferred()
            )
        if outcome is Outcome.SIGNALLED:
            continue  # a request came between our look and the suspension: take it
        if outcome is not Outcome.SUSPENDED:
            stop_writing(ctx)
        faults.reach(faults.AFTER_SUSPEND, **ctx.log_fields(index))
        raise ctx.stop(Suspended(describe_wait(name, deadline, "update")))


def _receive(
    ctx: WorkflowContext, index: int, name: str, update_id: int, payload_json: str
) -> UpdateRequest | None:
    """Take the request (validated first): it, or None when the validator refused it or
    it is no longer pending."""
    payload = serialization.loads(payload_json)
    validators: dict[str, Callable[[Any], Any]] = ctx.wings.get(VALIDATORS) or {}
    check = validators.get(name)
    area = UPDATES.of(ctx.store)
    if check is not None:
        try:
            check(payload)
        except Exception as exc:  # noqa: BLE001 - any error refuses, with its message
            reason = str(exc) or type(exc).__name__
            with store_guard(ctx):
                outcome = area.refuse_update(
                    ctx.run_id, ctx.fence, update_id, reason, ctx.take_deferred()
                )
            if outcome is not Outcome.RECORDED:
                stop_writing(ctx)
            logger.info(
                "workflow %s run %s: update %r (request %d) refused by its validator: %s",
                ctx.workflow_name,
                ctx.run_id,
                name,
                update_id,
                reason,
                extra=ctx.log_fields(index),
            )
            return None
    output = serialization.dumps({"id": update_id, "payload": payload})
    step = StepRecord(index, UPDATE_STEP_PREFIX + name, "ok", "[]", output, None, 0.0)
    with store_guard(ctx):
        outcome = area.receive_update(ctx.run_id, ctx.fence, update_id, step, ctx.take_deferred())
    if outcome is Outcome.NO_SIGNAL:
        return None
    if outcome is not Outcome.RECORDED:
        stop_writing(ctx)
    ctx.history[index] = step
    faults.reach(faults.AFTER_CONSUME_SIGNAL, **ctx.log_fields(index))
    return UpdateRequest(ctx, update_id, name, payload)
