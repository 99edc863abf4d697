"""Steps: functions whose result is recorded once and replayed ever after.

Example::

    @durable.step(max_attempts=5, backoff=0.5, retry_on=(ConnectionError,))
    def charge(order_id: int, amount: int) -> str:
        return payments.charge(order_id, amount)

Outside a workflow a step is a plain function call, which is how its unit tests call it
(a routed step, ``@durable.step(queue="gpu")``, refuses: call ``step.fn`` there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from typing import Any, ClassVar, Generic, ParamSpec, Protocol, TypeVar

from celery_durable.body.context import (
    RUNNING_STEP,
    FailedStep,
    LimiterView,
    StepCall,
    WorkflowContext,
    enter_body,
)
from celery_durable.body.event_loop import (
    ASYNC_BODY,
    IN_ASYNC_STEP,
    called,
    in_async_body,
    returned,
    running_step,
    uninterrupted,
)
from celery_durable.body.replay import (
    arecord,
    check_replay,
    confirm_lease,
    flush_deferred,
    record,
    write_caught_failure,
)
from celery_durable.core import faults, serialization, tracing
from celery_durable.core.retry import backoff, retryable
from celery_durable.errors import (
    InvalidArgument,
    NotSerialisable,
    WorkflowCancelled,
)
from celery_durable.store import StepRecord

logger = logging.getLogger("celery_durable.step")

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

DEFAULT_MAX_BACKOFF = 60.0
# "each": the step's record is a commit of its own before the body goes on (the default);
# "deferred": it is buffered and written with the run's next write (Temporal's local
# activities): cheaper, and a crash before that write runs the step again.
COMMIT_MODES = ("each", "deferred")

# Steps with a compensation, by name: a rollback finds what undoes a recorded step here.
COMPENSATED: dict[str, Step[Any, Any]] = {}


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """The keywords of ``@durable.step(...)`` and their defaults, written here only: a new
    one is a field here (``Durable.step``'s typed overload repeats them for type checkers
    and editors; tests/test_retry.py checks that the two agree)."""

    max_attempts: int = 1
    backoff: float = 0.0
    max_backoff: float = DEFAULT_MAX_BACKOFF
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    dont_retry_on: tuple[type[BaseException], ...] = ()
    # A routed step always runs as its own Celery task on this queue.
    queue: str | None = None
    # Undoes the step in a rollback: compensate(*args, result=<output>, **kwargs).
    compensate: Callable[..., Any] | None = None
    # "deferred": the record rides on the run's next write (see WorkflowContext.defer).
    commit: str = "each"
    # A fleet-wide limiter (durable.limiter, or its name, which Durable.step looks up):
    # each call takes a slot (and a token) first.
    limiter: LimiterView | str | None = None
    # At the run's deadline (timeout=), stop this step at once (Celery's revoke with
    # terminate), instead of cancelling the run at its next step.
    terminate_on_timeout: bool = False

    def __post_init__(self) -> None:
        # Any iterable of exception types will do, as before; isinstance() needs a tuple.
        object.__setattr__(self, "retry_on", tuple(self.retry_on))
        object.__setattr__(self, "dont_retry_on", tuple(self.dont_retry_on))

    def check(self, name: str) -> None:
        """Refuse options that can't work, naming step ``name`` and the option."""
        compensate, commit, queue = self.compensate, self.commit, self.queue
        if compensate is not None and not callable(compensate):
            raise TypeError(
                f"step {name}: compensate must be a function or a step, got "
                f"{type(compensate).__name__}"
            )
        if commit not in COMMIT_MODES:
            raise ValueError(
                f"step {name}: commit={commit!r} is not one of {', '.join(map(repr, COMMIT_MODES))}"
            )
        if commit == "deferred" and queue is not None:
            raise ValueError(
                f"step {name}: a routed step (queue={queue!r}) records as an item; "
                "commit='deferred' applies to steps that run in the workflow body"
            )
        if self.max_attempts < 1:
            raise ValueError(
                f"step {name}: max_attempts must be at least 1, got {self.max_attempts}"
            )
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError(
                f"step {name}: backoff={self.backoff} and max_backoff={self.max_backoff} "
                "must not be negative"
            )
        if self.limiter is not None and not isinstance(self.limiter, LimiterView):
            raise InvalidArgument(
                f"step {name}: limiter must be a durable.limiter(...) or the name of one, "
                f"got {self.limiter!r}"
            )


class Started(Protocol[R_co]):
    """What ``step.start()`` returns (fan-out's ``StepFuture``): ``result()`` waits for
    the step without holding a worker."""

    def result(self) -> R_co: ...


class StepStarter(Protocol):
    """How ``step.start()`` runs a step as a Celery task, given the run's context and
    the step index it took (fan-out's ``start_step``, which durable.py registers)."""

    def __call__(
        self,
        ctx: WorkflowContext,
        index: int,
        step: Step[Any, R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Started[R]: ...


class Step(Generic[P, R]):
    """A registered step; call it like the function it wraps."""

    # Set by durable.py: steps exist before any Durable runs them, and one way of starting
    # them serves all (a feature of the fan-out wing, as cd.map is).
    starter: ClassVar[StepStarter | None] = None

    def __init__(self, fn: Callable[P, R], *, name: str, options: StepOptions) -> None:
        options.check(name)
        self.fn = fn
        self.name = name
        self.options = options
        # ``async def``: a call in a workflow takes the step's index at once and returns
        # a coroutine that replays or runs it (``asyncio.gather`` runs several at once).
        self.is_async = inspect.iscoroutinefunction(fn)
        if options.compensate is not None:
            COMPENSATED[name] = self
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__qualname__ = getattr(fn, "__qualname__", name)
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<durable step {self.name}>"

    def __getattr__(self, attribute: str) -> Any:
        # step.max_attempts, step.queue, ...: read as attributes of the step before its
        # options became one StepOptions, so code that read them keeps working.
        options = self.__dict__.get("options")  # absent while copy/pickle rebuild a step
        if options is not None and attribute in StepOptions.__dataclass_fields__:
            return getattr(options, attribute)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attribute!r}")

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        ctx = WorkflowContext.current()
        queue = self.options.queue
        if queue is not None:
            if ctx is None or ctx.in_step:
                raise RuntimeError(
                    f"step {self.name} is routed to queue {queue!r}: called here it "
                    f"would run in this process, not on {queue!r}. Call it from a "
                    f"workflow body (it then runs as a Celery task on {queue!r}), or "
                    f"call {self.__name__}.fn(...) to run the function here (in a unit "
                    "test, say)"
                )
            return self.start(*args, **kwargs).result()
        if ctx is None or ctx.in_step or IN_ASYNC_STEP.get():
            return self.fn(*args, **kwargs)
        if self.is_async or in_async_body():
            return self._awaited_in(ctx, args, kwargs)  # type: ignore[arg-type,return-value]
        return self._run_in(ctx, args, kwargs)  # type: ignore[arg-type]

    def start(self, *args: P.args, **kwargs: P.kwargs) -> Started[R]:
        """Inside a workflow: run the step as a Celery task on its queue (or the
        workflow's), and return a future; ``future.result()`` or ``cd.gather`` wait for
        it without holding a worker."""
        ctx = enter_body(
            f"{self.name}.start()", f"call {self.name}(...) to run it here, or from a workflow"
        )
        index = ctx.take_index()
        if Step.starter is None:
            raise RuntimeError(f"step {self.name}: no Durable has installed step.start()")
        return Step.starter(ctx, index, self, args, kwargs)

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc, self.options.retry_on, self.options.dont_retry_on)

    def delay_after(self, attempt: int) -> float:
        return backoff(self.options.backoff, attempt - 1, self.options.max_backoff)

    def _run_in(self, ctx: WorkflowContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        if ASYNC_BODY.get():
            # A thread the async body started (asyncio.to_thread): steps called from
            # threads at once would take their indexes in whatever order they ran.
            raise TypeError(
                f"step {self.name} was called from a thread of an async workflow body "
                f"(asyncio.to_thread?): await {self.__name__}(...) in the body instead; a "
                "plain def step runs off the event loop by itself there"
            )
        index, step_input, recorded = self._begin(ctx, args, kwargs)
        if recorded is not None:
            if recorded.status == "ok":
                self._ok(ctx)
                return serialization.loads(recorded.output)  # type: ignore[no-any-return,arg-type]
            if recorded.status == "error":
                # A failure that did not end an attempt (the body caught it) is final:
                # replay the same exception. Only "retry" rows run again.
                raise serialization.rebuild_exception(self.name, recorded.error or "{}")
        guards = ctx.step_guards
        if not guards:
            return self._execute(ctx, index, step_input, args, kwargs)
        with ExitStack() as guarded:  # a limiter's slot, say (see StepGuard)
            for guard in guards:
                guarded.enter_context(guard.around(ctx, self, index, args, kwargs))
            return self._execute(ctx, index, step_input, args, kwargs)

    def _begin(
        self, ctx: WorkflowContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[int, str, StepRecord | None]:
        """A step call's turn in the run, sync or async: the index it takes, its input as
        JSON, and its record if history has one (checked against this call)."""
        ctx.check_stopping()
        write_caught_failure(ctx)
        if ctx.deferred_due():
            flush_deferred(ctx)
        index = ctx.take_index()
        step_input = serialization.encode_arguments(
            f"step {self.name}", self.fn, args, kwargs, ctx.max_payload_bytes, ctx.max_payload_depth
        )
        recorded = ctx.history.get(index)
        if recorded is None:
            confirm_lease(ctx)
        else:
            check_replay(ctx, index, recorded, self.name, step_input)
        return index, step_input, recorded

    def _execute(
        self,
        ctx: WorkflowContext,
        index: int,
        step_input: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """Run the step (retrying in-process) and record its outcome, in its own span."""
        # A deferred step sends no event: it is meant to be short, and the event's
        # publish would cost the round trip deferring saves.
        if ctx.on_step is not None and self.options.commit == "each":
            ctx.on_step(index, self.name)
        with tracing.step(self.name, index, ctx.run_id):
            attempt = 0
            started = time.monotonic()  # the step's duration includes its in-process retries
            while True:
                attempt += 1
                ctx.in_step = True
                call = StepCall(index)
                running = RUNNING_STEP.set(call)
                try:
                    try:
                        value = self.fn(*args, **kwargs)
                    finally:
                        if call.before_record:  # a stream's values, stored before the record
                            call.finish(sys.exc_info()[0] is not None)
                except Exception as exc:
                    delay = self._retry_delay(ctx, index, attempt, exc)
                    if delay is not None:
                        time.sleep(delay)
                        continue
                    raise self._failed(ctx, index, step_input, exc, started) from None
                finally:
                    ctx.in_step = False
                    RUNNING_STEP.reset(running)
                return self._recorded(ctx, index, step_input, value, started)  # type: ignore[no-any-return]

    def _awaited_in(
        self, ctx: WorkflowContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Coroutine[Any, Any, R]:
        """An async step's call in a body: its index is taken now, in call order, so
        replay gives each call the same record whatever order they finish in; the
        coroutine returned replays the record or runs the step."""
        index, step_input, recorded = self._begin(ctx, args, kwargs)
        label = f"step {self.name} (index {index})"
        if recorded is not None and recorded.status == "ok":
            self._ok(ctx)
            return returned(label, serialization.loads(recorded.output))  # type: ignore[arg-type]
        if recorded is not None and recorded.status == "error":
            error = serialization.rebuild_exception(self.name, recorded.error or "{}")
            return called(label, _raising(error))
        # Not recorded, or "retry": it runs (again).
        return called(label, self._aexecute(ctx, index, step_input, args, kwargs))

    async def _aexecute(
        self,
        ctx: WorkflowContext,
        index: int,
        step_input: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """``_execute`` in an async body: awaited (a plain def step on a thread of the
        loop's), retried after ``asyncio.sleep``, recorded off the loop."""
        with running_step(), ExitStack() as guarded:  # and a limiter's slot, say (StepGuard)
            for guard in ctx.step_guards:
                guarded.enter_context(guard.around(ctx, self, index, args, kwargs))
            if ctx.on_step is not None and self.options.commit == "each":
                ctx.on_step(index, self.name)
            with tracing.step(self.name, index, ctx.run_id):
                attempt = 0
                started = time.monotonic()
                while True:
                    attempt += 1
                    inside = IN_ASYNC_STEP.set(True)  # copied into to_thread's context
                    this_try = StepCall(index)
                    running = RUNNING_STEP.set(this_try)
                    cancelled = False
                    try:
                        try:
                            if self.is_async:
                                value = await self.fn(*args, **kwargs)  # type: ignore[misc]
                            else:
                                # A thread can't be stopped: a cancel lets it finish, and
                                # its result is recorded before the body stops.
                                call = asyncio.to_thread(self.fn, *args, **kwargs)
                                value, cancelled = await uninterrupted(call)
                        finally:
                            if this_try.before_record:  # waits for the database: off the loop
                                failed = sys.exc_info()[0] is not None
                                await asyncio.to_thread(this_try.finish, failed)
                    except Exception as exc:
                        delay = self._retry_delay(ctx, index, attempt, exc)
                        if delay is not None:
                            await asyncio.sleep(delay)
                            continue
                        raise self._failed(ctx, index, step_input, exc, started) from None
                    finally:
                        IN_ASYNC_STEP.reset(inside)
                        RUNNING_STEP.reset(running)
                    done = self._outcome(ctx, index, step_input, value, started)
                    if self.options.commit == "deferred":
                        output = self._deferred(ctx, done)
                    else:
                        try:
                            stored = await arecord(ctx, done)
                        except WorkflowCancelled:
                            self._ok(ctx)  # recorded all the same, as in _recorded
                            raise
                        self._ok(ctx)
                        output = serialization.loads(stored.output or "null")
                    if cancelled:
                        raise asyncio.CancelledError()
                    return output  # type: ignore[no-any-return]

    def _retry_delay(
        self, ctx: WorkflowContext, index: int, attempt: int, exc: Exception
    ) -> float | None:
        """Seconds to wait before the step's next in-process try (said in the log and the
        span), or None: ``exc`` ends its tries."""
        if attempt >= self.options.max_attempts or not self.retryable(exc):
            return None
        delay = self.delay_after(attempt)
        logger.warning(
            "step %s failed (attempt %d of %d), retrying in %.2fs: %r",
            self.name,
            attempt,
            self.options.max_attempts,
            delay,
            exc,
            extra=ctx.log_fields(index),
        )
        tracing.event("retry", attempt=attempt, error=repr(exc), delay=delay)
        return delay

    def _recorded(
        self, ctx: WorkflowContext, index: int, step_input: str, value: Any, started: float
    ) -> Any:
        """Record a step's value (its own commit, or deferred) and return what replay
        will return (the JSON round trip, so both paths agree)."""
        done = self._outcome(ctx, index, step_input, value, started)
        if self.options.commit == "deferred":
            return self._deferred(ctx, done)
        try:
            stored = record(ctx, done)
        except WorkflowCancelled:
            # Recorded all the same (record): a worker lost before its rollback ends
            # leaves the run to one that rolls it back, this step included.
            self._ok(ctx)
            raise
        self._ok(ctx)
        return serialization.loads(stored.output or "null")

    def _outcome(
        self, ctx: WorkflowContext, index: int, step_input: str, value: Any, started: float
    ) -> StepRecord:
        """The record of a step that returned ``value``; a value that can't be stored is
        the step's failure."""
        took = time.monotonic() - started
        try:
            output = serialization.encode_value(
                f"step {self.name}", value, ctx.max_payload_bytes, ctx.max_payload_depth
            )
        except NotSerialisable as exc:
            raise self._failed(ctx, index, step_input, exc, started) from None
        return StepRecord(index, self.name, "ok", step_input, output, None, took, began=started)

    def _deferred(self, ctx: WorkflowContext, done: StepRecord) -> Any:
        """Buffer a deferred step's record for the run's next write."""
        ctx.defer(done)
        if ctx.deferred_due():
            flush_deferred(ctx)
        self._ok(ctx)
        faults.reach(faults.AFTER_DEFER_STEP, **ctx.log_fields(done.idx))
        return serialization.loads(done.output or "null")

    def _ok(self, ctx: WorkflowContext) -> None:
        """The step's result is recorded or replayed: its guards hear of it (a step with a
        compensation marks the run, so that cancelling it while it waits rolls it back)."""
        for guard in ctx.step_guards:
            guard.step_ok(ctx, self)

    def _failed(
        self,
        ctx: WorkflowContext,
        index: int,
        step_input: str,
        exc: BaseException,
        started: float,
    ) -> BaseException:
        """Remember the failure; its record is written with whatever write comes next
        (``started``: the step's first try, on the monotonic clock)."""
        pending = ctx.failed_step
        if ASYNC_BODY.get() and pending is not None and not pending.written:
            # Gathered steps that failed together: the first failure is the one kept
            # (and raised by gather); this step isn't recorded, so it runs again.
            return exc
        error = serialization.encode_error(exc)
        took = time.monotonic() - started
        record = StepRecord(index, self.name, "error", step_input, None, error, took, began=started)
        ctx.failed_step = FailedStep(record, exc)
        return exc


async def _raising(error: BaseException) -> Any:
    raise error
