"""Steps: functions whose result is recorded once and replayed ever after.

Example::

    @durable.step(max_attempts=5, backoff=0.5, retry_on=(ConnectionError,))
    def charge(order_id: int, amount: int) -> str:
        return payments.charge(order_id, amount)

Outside a workflow a step is a plain function call, which is how its unit tests call it
(a routed step, ``@durable.step(queue="gpu")``, refuses: call ``step.fn`` there).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, TypeVar

from celery_durable.body.context import FailedStep, WorkflowContext
from celery_durable.core import faults, serialization, tracing
from celery_durable.core.retry import backoff, retryable
from celery_durable.errors import (
    LeaseLost,
    NonDeterminismError,
    NotSerialisable,
    StoreUnavailable,
    WorkflowCancelled,
)
from celery_durable.store import Outcome, StepRecord

if TYPE_CHECKING:
    from celery_durable.body.fanout import StepFuture

logger = logging.getLogger("celery_durable.step")

P = ParamSpec("P")
R = TypeVar("R")

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


class Step(Generic[P, R]):
    """A registered step; call it like the function it wraps."""

    def __init__(self, fn: Callable[P, R], *, name: str, options: StepOptions) -> None:
        options.check(name)
        self.fn = fn
        self.name = name
        self.options = options
        if options.compensate is not None:
            COMPENSATED[name] = self
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__qualname__ = getattr(fn, "__qualname__", name)
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<durable step {self.name}>"

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
        if ctx is None or ctx.in_step:
            return self.fn(*args, **kwargs)
        return self._run_in(ctx, args, kwargs)  # type: ignore[arg-type]

    def start(self, *args: P.args, **kwargs: P.kwargs) -> StepFuture[R]:
        """Inside a workflow: run the step as a Celery task on its queue (or the
        workflow's), and return a future; ``future.result()`` or ``cd.gather`` wait for
        it without holding a worker."""
        # compose builds on this module (records, replay checks): imported on use.
        from celery_durable.body.fanout import start_step

        return start_step(self, args, kwargs)

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc, self.options.retry_on, self.options.dont_retry_on)

    def delay_after(self, attempt: int) -> float:
        return backoff(self.options.backoff, attempt - 1, self.options.max_backoff)

    def _run_in(self, ctx: WorkflowContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        ctx.check_stopping()
        write_caught_failure(ctx)
        if ctx.deferred_due():
            flush_deferred(ctx)
        index = ctx.take_index()
        step_input = serialization.encode_arguments(
            f"step {self.name}", self.fn, args, kwargs, ctx.max_payload_bytes
        )
        recorded = ctx.history.get(index)
        if recorded is None:
            confirm_lease(ctx)
        if recorded is not None:
            check_replay(ctx, index, recorded, self.name, step_input)
            if recorded.status == "ok":
                self._note_compensable(ctx)
                return serialization.loads(recorded.output)  # type: ignore[no-any-return,arg-type]
            if recorded.status == "error":
                # A failure that did not end an attempt (the body caught it) is final:
                # replay the same exception. Only "retry" rows run again.
                raise serialization.rebuild_exception(self.name, recorded.error or "{}")
        return self._execute(ctx, index, step_input, args, kwargs)

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
        with tracing.step(self.name, index, ctx.workflow_id):
            attempt = 0
            started = time.monotonic()  # the step's duration includes its in-process retries
            while True:
                attempt += 1
                ctx.in_step = True
                try:
                    value = self.fn(*args, **kwargs)
                except Exception as exc:
                    if attempt < self.options.max_attempts and self.retryable(exc):
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
                        time.sleep(delay)
                        continue
                    raise self._failed(ctx, index, step_input, exc, started) from None
                finally:
                    ctx.in_step = False
                took = time.monotonic() - started
                try:
                    output = serialization.encode_value(
                        f"step {self.name}", value, ctx.max_payload_bytes
                    )
                except NotSerialisable as exc:
                    raise self._failed(ctx, index, step_input, exc, started) from None
                done = StepRecord(
                    index, self.name, "ok", step_input, output, None, took, began=started
                )
                if self.options.commit == "deferred":
                    ctx.defer(done)
                    if ctx.deferred_due():
                        flush_deferred(ctx)
                    self._note_compensable(ctx)
                    faults.reach(faults.AFTER_DEFER_STEP, **ctx.log_fields(index))
                    return serialization.loads(output)  # type: ignore[no-any-return]
                stored = record(ctx, done)
                self._note_compensable(ctx)
                # Return what replay will return (JSON round trip), so both paths agree.
                return serialization.loads(stored.output or "null")  # type: ignore[no-any-return]

    def _note_compensable(self, ctx: WorkflowContext) -> None:
        """A finished step with a compensation: mark the run, once, so that cancelling
        it while it waits rolls it back."""
        if self.options.compensate is None or ctx.compensable:
            return
        with store_guard(ctx):
            marked = ctx.store.mark_compensable(ctx.workflow_id, ctx.fence)
        if not marked:
            stop_writing(ctx)
        ctx.compensable = True

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
        error = serialization.encode_error(exc)
        took = time.monotonic() - started
        record = StepRecord(index, self.name, "error", step_input, None, error, took, began=started)
        ctx.failed_step = FailedStep(record, exc)
        return exc


def check_replay(
    ctx: WorkflowContext, index: int, recorded: StepRecord, name: str, step_input: str
) -> None:
    """Raise NonDeterminismError when the code no longer calls what history recorded."""
    if recorded.name != name:
        raise NonDeterminismError(
            f"workflow {ctx.workflow_name} run {ctx.workflow_id!r}: step {index} is "
            f"{name!r} in the code but {recorded.name!r} in the recorded history"
            + _changed_code_hint(ctx, index)
        )
    if recorded.input != step_input:
        raise NonDeterminismError(
            f"workflow {ctx.workflow_name} run {ctx.workflow_id!r}: step {index} ({name}) "
            f"was called with different input: recorded {_clip(recorded.input)}, "
            f"now {_clip(step_input)}" + _changed_code_hint(ctx, index)
        )


def _changed_code_hint(ctx: WorkflowContext, index: int) -> str:
    return (
        ". If the workflow's code changed while this run was in flight, guard the change "
        'with `if celery_durable.patched("<change-id>"):` (runs that passed this point '
        "before the deploy get False and keep the old branch), or restart the run on "
        f"today's code from before this step: `celery -A <app> durable fork "
        f"{ctx.workflow_id} --from-step {index}`"
    )


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def stop_writing(ctx: WorkflowContext) -> NoReturn:
    """A fenced write failed: raise WorkflowCancelled or LeaseLost, whichever is true."""
    with store_guard(ctx):
        run = ctx.store.get_run(ctx.workflow_id)
    if run is not None and run.fence == ctx.fence and run.cancel_requested:
        raise ctx.stop(WorkflowCancelled(ctx.workflow_id, run.cancel_reason))
    raise ctx.stop(LeaseLost(f"run {ctx.workflow_id!r} is no longer owned by this worker"))


@contextmanager
def store_guard(ctx: WorkflowContext) -> Iterator[None]:
    """A database error inside the body becomes StoreUnavailable, which user code's
    ``except Exception`` can't swallow; the run is then left to its lease."""
    try:
        yield
    except Exception as exc:
        stopped = StoreUnavailable(f"run {ctx.workflow_id!r}: the store failed: {exc!r}")
        raise ctx.stop(stopped) from exc


def confirm_lease(ctx: WorkflowContext) -> None:
    """Before a step's side effects: if the heartbeat hasn't extended the lease lately (the
    process was paused?), extend it in one fenced statement, or stop: a new owner may
    have run this very step already."""
    if not ctx.lease.doubtful():
        return
    with store_guard(ctx):
        still_ours = ctx.store.renew_lease(ctx.workflow_id, ctx.fence, ctx.lease.lease)
    if not still_ours:
        stop_writing(ctx)
    ctx.lease.renewed()


def write_caught_failure(ctx: WorkflowContext) -> None:
    """The body caught a step failure and goes on: record it, so replay raises it again."""
    failed = ctx.failed_step
    if failed is not None and not failed.written:
        failed.written = True
        record(ctx, failed.record)


def flush_deferred(ctx: WorkflowContext) -> None:
    """Write the buffered records of deferred steps on their own (a bound was reached)."""
    if ctx.deferred:
        last = ctx.deferred.pop()
        record(ctx, last)


def record(ctx: WorkflowContext, step: StepRecord) -> StepRecord:
    """Persist a step under the run's fencing token, with the deferred steps' records the
    run holds; stop the body if the lease is gone."""
    carried = ctx.take_deferred()
    with store_guard(ctx):
        written = ctx.store.record_step(ctx.workflow_id, ctx.fence, step, carried=carried)
    if written.outcome is Outcome.RECORDED:
        ctx.history[step.idx] = step
        for each in (*carried, step):
            logger.debug(
                "workflow %s run %s: step %d (%s) recorded %s%s",
                ctx.workflow_name,
                ctx.workflow_id,
                each.idx,
                each.name,
                each.status,
                " (deferred)" if each is not step else "",
                extra=ctx.log_fields(each.idx),
            )
        faults.reach(faults.AFTER_RECORD_STEP, **ctx.log_fields(step.idx))
        return step
    if written.stored is None:
        stop_writing(ctx)
    # An earlier write of this step committed (e.g. interrupted after the server's
    # commit): keep what is stored, so every replay agrees with it.
    check_replay(ctx, step.idx, written.stored, step.name, step.input)
    ctx.history[step.idx] = written.stored
    return written.stored
