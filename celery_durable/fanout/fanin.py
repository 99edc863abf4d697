"""Fan-in: waiting inside a workflow body for step futures, maps and children.

A body that waits suspends like ``wait_for_signal``: WAITING, no lease, no worker slot, no
message. The transaction that records the last awaited item wakes it (no polling, no
chord_unlock). Once every item of a fan-out step has settled, the body records the step
"ok" with all outcomes, so later replays read one row.

Example::

    a, b = cd.gather(fetch.start("a"), fetch.start("b"))
    shipped = ship.start_child(doc_id).result()
"""

from __future__ import annotations

import builtins
from collections.abc import Generator, Sequence
from typing import Any, Generic, TypeVar

from celery.exceptions import TimeoutError as CeleryTimeoutError

from celery_durable.body.context import WorkflowContext, enter_body
from celery_durable.body.event_loop import awaited_wait, in_async_body
from celery_durable.body.replay import (
    check_replay,
    record,
    stop_writing,
    store_guard,
    write_caught_failure,
)
from celery_durable.body.step import Started
from celery_durable.core import faults, serialization
from celery_durable.errors import StepFailed, Suspended, WorkflowCancelled, WorkflowFailed
from celery_durable.fanout.insert import fresh_steps
from celery_durable.fanout.store_area import FANOUT
from celery_durable.store import FanOutState, ItemFailure, Outcome, StepRecord

R = TypeVar("R")

# A ChildHandle.result(timeout=...) records whether it timed out, so replay agrees.
TIMED_WAIT_STEP = "celery_durable.wait_child"


class StepFuture(Generic[R]):
    """A step started as a Celery task with ``step.start(...)``; ``result()`` waits for it.

    Waiting suspends the run (no worker is held) until the task has recorded its outcome.
    """

    def __init__(self, idx: int, step_name: str) -> None:
        self.idx = idx
        self.step_name = step_name

    def __repr__(self) -> str:
        return f"<StepFuture {self.step_name} at step {self.idx}>"

    def result(self) -> R:
        """The step's return value; StepFailed (original type, message, traceback) if it
        failed after its own retries. In an async workflow: ``await future`` (or
        ``await future.result()``)."""
        if in_async_body():
            return self._awaited()  # type: ignore[return-value]
        value: R = gather(self)[0]
        return value

    def __await__(self) -> Generator[Any, None, R]:
        return self._awaited().__await__()

    def _awaited(self) -> Any:
        ctx = enter_body(f"awaiting {self!r}")
        return awaited_wait(repr(self), lambda: gather_now(ctx, [self], False)[0])

    def _failure(self, ctx: WorkflowContext, item: int, failure: ItemFailure) -> BaseException:
        return item_failure(ctx, self.step_name, item, failure)


class ChildHandle(Generic[R]):
    """A child workflow started with ``workflow.start_child(...)``.

    ``id`` is its workflow id (``durable.get_handle(id)`` works on it from anywhere);
    ``result()`` waits for it without holding a worker; ``cd.gather`` accepts it.
    """

    def __init__(self, idx: int, run_id: str, workflow_name: str) -> None:
        self.idx = idx
        self.id = run_id
        self.workflow_name = workflow_name

    def __repr__(self) -> str:
        return f"<ChildHandle {self.workflow_name} id={self.id!r}>"

    def result(self, timeout: float | None = None) -> R:
        """The child's return value. Raises WorkflowFailed or WorkflowCancelled if it
        ended so, and ``celery.exceptions.TimeoutError`` once ``timeout`` seconds (a
        durable timer) have passed first; the child goes on running then. In an async
        workflow: ``await child`` (or ``await child.result(timeout=...)``)."""
        if timeout is None:
            if in_async_body():
                return self._awaited()  # type: ignore[return-value]
            value: R = gather(self)[0]
            return value
        return self._result_within(timeout)

    def __await__(self) -> Generator[Any, None, R]:
        return self._awaited().__await__()

    def _awaited(self) -> Any:
        ctx = enter_body(f"awaiting {self!r}")
        return awaited_wait(repr(self), lambda: gather_now(ctx, [self], False)[0])

    def _result_within(self, timeout: float) -> R:
        if timeout != timeout or timeout < 0:
            raise ValueError(f"result(timeout) must be None or >= 0, got {timeout!r}")
        ctx = enter_body("ChildHandle.result()", "use durable.get_handle(id).get()")
        write_caught_failure(ctx)
        # The timed wait is a step of its own: replay must know whether it timed out.
        index = ctx.take_index()
        if in_async_body():
            label = f"{self!r}.result(timeout={timeout}) (index {index})"
            return awaited_wait(label, lambda: self._within_at(ctx, index, timeout))  # type: ignore[return-value]
        return self._within_at(ctx, index, timeout)

    def _within_at(self, ctx: WorkflowContext, index: int, timeout: float) -> R:
        ctx.check_stopping()
        step_input = serialization.dumps({"child": self.idx})
        recorded = ctx.history.get(index)
        deadline: float | None = None
        if recorded is not None:
            check_replay(ctx, index, recorded, TIMED_WAIT_STEP, step_input)
            if recorded.status == "ok":
                if serialization.loads(recorded.output or "{}").get("timed_out"):
                    raise self._timed_out(timeout)
                value: R = gather_now(ctx, [self], False)[0]
                return value
            deadline = serialization.loads(recorded.output or "{}").get("deadline")
        store = ctx.store
        if deadline is None:
            with store_guard(ctx):
                deadline = store.now() + timeout
        while True:
            done = settled_now(ctx, [self.idx])
            with store_guard(ctx):
                late = store.now() >= deadline
            if done or late:
                outcome = serialization.dumps({"timed_out": not done, "deadline": deadline})
                record(ctx, StepRecord(index, TIMED_WAIT_STEP, "ok", step_input, outcome, None))
                if not done:
                    raise self._timed_out(timeout)
                value = gather_now(ctx, [self], False)[0]
                return value
            waiting = StepRecord(
                index,
                TIMED_WAIT_STEP,
                "waiting",
                step_input,
                serialization.dumps({"deadline": deadline}),
                None,
            )
            suspend(ctx, [self.idx], wake_at=deadline, step=waiting)

    def _timed_out(self, timeout: float) -> CeleryTimeoutError:
        return CeleryTimeoutError(
            f"child workflow {self.id!r} did not finish within {timeout}s; it goes on running"
        )

    def _failure(self, ctx: WorkflowContext, item: int, failure: ItemFailure) -> BaseException:
        if failure.status == "cancelled":
            exc: BaseException = WorkflowCancelled(self.id, failure.error)
        else:
            error = serialization.decode_error(failure.error or "{}")
            exc = WorkflowFailed(
                self.id,
                error.get("type", "unknown"),
                error.get("message", ""),
                error.get("traceback", ""),
            )
        # Replay raises it again, identically: a workflow retry would not help.
        exc.final = True  # type: ignore[attr-defined]
        return exc


Awaitable = StepFuture[Any] | ChildHandle[Any]


def item_failure(
    ctx: WorkflowContext, step_name: str, item: int, failure: ItemFailure
) -> BaseException:
    """The exception a failed item raises in the body, the same on every replay."""
    if failure.status == "cancelled":
        # Items are cancelled only with their run: this body is being cancelled.
        return WorkflowCancelled(ctx.run_id, failure.error)
    error = serialization.decode_error(failure.error or "{}")
    exc = StepFailed(
        step_name,
        error.get("type", "unknown"),
        error.get("message", ""),
        error.get("traceback", ""),
        item,
    )
    # Replay raises it again, identically: a workflow retry would not help.
    exc.final = True  # type: ignore[attr-defined]
    return exc


# -- waiting --------------------------------------------------------------------------------


def gather(*awaitables: Awaitable | Started[Any], return_exceptions: bool = False) -> Any:
    """Wait for step futures and child handles; their results, in argument order.

    The run suspends (no worker held) until all have settled, then the failure of the
    first failed one is raised (StepFailed for a step, WorkflowFailed or
    WorkflowCancelled for a child); ``return_exceptions=True`` returns them in place.
    In an async workflow, await it: ``a, b = await cd.gather(f1, f2)``.
    """
    checked: list[Awaitable] = []  # step.start() is typed as the kernel's Started
    for awaitable in awaitables:
        if not isinstance(awaitable, StepFuture | ChildHandle):
            raise TypeError(
                f"cd.gather() takes step futures (step.start()) and child handles "
                f"(workflow.start_child()), got {awaitable!r}"
            )
        checked.append(awaitable)
    ctx = enter_body("cd.gather()", "use handle.get() on workflow handles")
    if in_async_body():
        label = f"cd.gather() of steps {[a.idx for a in checked]}"
        return awaited_wait(label, lambda: gather_now(ctx, checked, return_exceptions))
    return gather_now(ctx, checked, return_exceptions)


def gather_now(
    ctx: WorkflowContext, awaitables: list[Awaitable], return_exceptions: bool
) -> list[Any]:
    """``gather``'s wait: returns once all have settled, or suspends the run."""
    ctx.check_stopping()
    write_caught_failure(ctx)
    resolved = wait_for(ctx, [a.idx for a in awaitables])
    return collect(ctx, [(a, resolved[a.idx], 1) for a in awaitables], return_exceptions)


def collect(
    ctx: WorkflowContext,
    parts: Sequence[tuple[Awaitable, Resolved, int]],
    return_exceptions: bool,
) -> list[Any]:
    """Lay out the results; raise the first failure unless ``return_exceptions``."""
    results: list[Any] = []
    first: BaseException | None = None
    for awaitable, resolved, count in parts:
        values, failures = resolved
        for item in builtins.range(count):
            failure = failures.get(item)
            if failure is None:
                results.append(values[item])
                continue
            exc = awaitable._failure(ctx, item, failure)
            if return_exceptions:
                results.append(exc)
            else:
                first = first or exc
                results.append(None)
    if first is not None:
        raise first
    return results


# (values in item order, failures by item): what a settled fan-out step holds.
Resolved = tuple[list[Any], dict[int, ItemFailure]]


def wait_for(ctx: WorkflowContext, idxs: Sequence[int]) -> dict[int, Resolved]:
    """Wait until every item of these fan-out steps has settled; suspend meanwhile."""
    resolved: dict[int, Resolved] = {}
    pending: list[int] = []
    for idx in dict.fromkeys(idxs):
        recorded = ctx.history[idx]
        if recorded.status == "ok":
            resolved[idx] = from_record(recorded)
        else:
            pending.append(idx)
    # Just dispatched: the items have most likely not run yet, so suspending comes first
    # (and reads nothing); a replay after a wake-up reads first (all have settled).
    if any(idx in fresh_steps(ctx) for idx in pending):
        suspend(ctx, pending)
    while pending:
        with store_guard(ctx):
            states = FANOUT.of(ctx.store).load_items(ctx.run_id, pending)
        still = []
        for idx in pending:
            state = states.get(idx)
            if state is not None and state.unsettled:
                still.append(idx)
            else:
                resolved[idx] = settle_record(ctx, idx, state)
        pending = still
        if pending:
            suspend(ctx, pending)
    return resolved


def settled_now(ctx: WorkflowContext, idxs: Sequence[int]) -> bool:
    """Whether every item of these fan-out steps has settled (one read, no waiting)."""
    open_ = [idx for idx in idxs if ctx.history[idx].status != "ok"]
    if not open_:
        return True
    with store_guard(ctx):
        states = FANOUT.of(ctx.store).load_items(ctx.run_id, open_)
    return not any(state.unsettled for state in states.values())


def suspend(
    ctx: WorkflowContext,
    idxs: Sequence[int],
    wake_at: float | None = None,
    step: StepRecord | None = None,
) -> None:
    """Release the run until these items settle; returns only if they all have."""
    with store_guard(ctx):
        outcome = FANOUT.of(ctx.store).suspend_on_items(
            ctx.run_id, ctx.fence, idxs, wake_at, step, ctx.take_deferred()
        )
    if outcome is Outcome.SETTLED:
        return
    if outcome is not Outcome.SUSPENDED:
        stop_writing(ctx)
    faults.reach(faults.AFTER_SUSPEND, **ctx.log_fields(idxs[0]))
    steps = ", ".join(str(idx) for idx in idxs)
    raise ctx.stop(Suspended(f"waiting for the items of step(s) {steps}"))


def settle_record(ctx: WorkflowContext, idx: int, state: FanOutState | None) -> Resolved:
    """Every item of fan-out ``idx`` has settled: record the step "ok" with all outcomes
    (one row for every later replay) and return them."""
    started = ctx.history[idx]
    outputs = state.outputs if state is not None else []
    failures = state.failures if state is not None else {}
    output = "[" + ",".join("null" if text is None else text for text in outputs) + "]"
    error = None
    if failures:
        error = serialization.dumps(
            {str(item): {"status": f.status, "error": f.error} for item, f in failures.items()}
        )
    stored = record(ctx, StepRecord(idx, started.name, "ok", started.input, output, error))
    return from_record(stored)


def from_record(recorded: StepRecord) -> Resolved:
    values = serialization.loads(recorded.output or "[]")
    failures: dict[int, ItemFailure] = {}
    if recorded.error:
        for item, failure in serialization.loads(recorded.error).items():
            failures[int(item)] = ItemFailure(failure["status"], failure["error"])
    return values, failures
