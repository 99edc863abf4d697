"""The workflow run the current code executes under, kept in a context variable.

A ``WorkflowContext`` holds what every run needs: its run, lease, replay position and
bounds. A feature keeps its own state in a slot of its own (``ctx.wing_state``), and
what may wrap each step it runs (a limiter's slot, say) is one of the ``step_guards``
the engine hands the context: the replay kernel names no feature.

Example::

    from celery_durable import WorkflowContext

    def audit(message: str) -> None:
        ctx = WorkflowContext.current()
        prefix = f"[{ctx.run_id}] " if ctx else ""
        print(prefix + message)
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from celery_durable.body.event_loop import IN_ASYNC_STEP
from celery_durable.errors import RunLimitExceeded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from contextlib import AbstractContextManager

    from celery_durable.store import DueRun, StepRecord, StepWrite, Store

T = TypeVar("T")

# The name prefix of the markers ``patched()`` records (see ``celery_durable.patching``).
PATCH_STEP_PREFIX = "celery_durable.patch:"

_current: contextvars.ContextVar[WorkflowContext | None] = contextvars.ContextVar(
    "celery_durable_workflow", default=None
)


class DispatchView(Protocol):
    """What the engine lends a body to start work elsewhere: publishing Celery messages.

    The body API can't import the engine (layers point one way), so the engine passes
    this in the context; ``celery_durable.engine.publish.Dispatch`` implements it.
    """

    @property
    def dispatch_grace(self) -> float:
        """Seconds a published item may wait in its queue before it is published again."""
        ...

    @property
    def in_process(self) -> bool:
        """Tasks run in this process as they are sent (``task_always_eager``)."""
        ...

    def publish_items(
        self,
        step_name: str,
        queue: str | None,
        run_id: str,
        idx: int,
        items: Iterable[int],
        batch_size: int = 1,
    ) -> None:
        """Publish the item tasks ``items`` of fan-out step ``idx``, ``batch_size`` items
        to a task; log, never raise."""
        ...

    def concurrency(self) -> int:
        """How many pool processes the fleet has (for ``batch_size="auto"``)."""
        ...

    def publish_run(self, run: DueRun) -> None:
        """Publish a stored run's task message (a child, a woken parent)."""
        ...

    def terminate(self, run_id: str) -> None:
        """Celery's revoke with terminate of the run's task: stop the step running now."""
        ...


class RunningStep(Protocol):
    """A step as a guard sees it: its name and its options (``body.step.StepOptions``)."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> Any: ...


@runtime_checkable
class LimiterView(Protocol):
    """A limiter as the kernel holds it (``limiters.limiter.Limiter``): what a step or a
    workflow is given as ``limiter=``, and the Runtime keeps by name; its wing acts on it."""

    @property
    def name(self) -> str: ...

    @property
    def limit(self) -> Any:
        """Its limits (the wing's ``limiters.buckets.Limit``), which only its wing reads."""
        ...

    def key_of(self, owner: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The key the call's arguments fall under ("" without a key function)."""
        ...


class StepGuard:
    """What may wrap every step a body runs (not replays), and hear of each step that
    ends well: registered once per Durable (``wiring.py``) and handed to each context
    by the engine. A limiter's slot, say, or a saga's mark. As a middleware's, each
    method does nothing unless the feature overrides it."""

    def index_taken(self, ctx: WorkflowContext, index: int) -> None:
        """The body took step index ``index`` (a step, a wait, a fan-out...)."""

    def around(
        self,
        ctx: WorkflowContext,
        step: RunningStep,
        index: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> AbstractContextManager[None]:
        """Held while step ``index`` runs and records; it sees the step's exception."""
        return nullcontext()

    def step_ok(self, ctx: WorkflowContext, step: RunningStep) -> None:
        """The step's result is recorded (or deferred, or replayed)."""


@dataclasses.dataclass
class LeaseClock:
    """When this process last knew the run's lease was extended (monotonic seconds).

    The heartbeat renews every third of the lease; a process that was paused (SIGSTOP, a
    long GC, a frozen VM) wakes up with a stale clock and must confirm the lease before it
    runs another step's side effects, since a new owner may have run that step already.
    """

    lease: float
    renewed_at: float = dataclasses.field(default_factory=time.monotonic)
    # Set while an async body runs: cancels its task at its current await.
    interrupt: Callable[[], None] | None = None

    def renewed(self) -> None:
        self.renewed_at = time.monotonic()

    def cancel_requested(self) -> None:
        """The heartbeat found the run's cancellation requested (called on its thread)."""
        interrupt = self.interrupt
        if interrupt is not None:
            interrupt()

    def doubtful(self) -> bool:
        return time.monotonic() - self.renewed_at > self.lease / 2


@dataclasses.dataclass
class WorkflowContext:
    """One execution of a workflow body: its run, lease and replay position."""

    store: Store
    run_id: str
    workflow_name: str
    attempt: int
    fence: int
    history: dict[int, StepRecord]
    lease: LeaseClock = dataclasses.field(default_factory=lambda: LeaseClock(float("inf")))
    next_index: int = 0
    in_step: bool = False
    # Set once the body must stop (suspended, lease lost, cancelled): steps and waits in
    # the user's finally/with blocks re-raise it instead of running.
    stopping: BaseException | None = None
    # The last step failure the body raised. Its record is written lazily: with the next
    # write if the body caught it, or with the retry or settle it caused, in one transaction.
    failed_step: FailedStep | None = None
    # Where remote steps of this run go when theirs names no queue (the run's own queue).
    queue: str | None = None
    # A child run's parent and the parent's step index that started it.
    parent_id: str | None = None
    parent_idx: int | None = None
    dispatch: DispatchView | None = None
    # Records of deferred steps (commit="deferred") not written yet: they ride on the next
    # write, or go on their own once there are ``deferred_max_steps`` of them or the
    # oldest is ``deferred_max_age`` seconds old. A crash loses them: those steps run again.
    deferred: list[StepRecord] = dataclasses.field(default_factory=list)
    deferred_since: float = 0.0
    deferred_max_steps: int = 100
    deferred_max_age: float = 1.0
    # When this delivery's hard time limit runs out (monotonic), if it has one: billiard's
    # SIGTERM after it is a failed attempt, not a shutdown (shutdown.interruption).
    hard_deadline: float | None = None
    # Called with (index, name) as each step this delivery runs (not replays) starts: the
    # engine reports it to Flower (a resumed run's line names the step it is on).
    on_step: Callable[[int, str], None] | None = None
    # durable_max_payload_bytes: a new step input or output, state value, child's or
    # item's arguments or result larger than this (as JSON) is refused; None: no limit.
    max_payload_bytes: int | None = None
    # durable_max_payload_depth: any of those nested deeper than this is refused.
    max_payload_depth: int = 100
    # durable_max_steps: a new step at this index or beyond fails the run (a looping run
    # should continue_as_new); None: no limit. Replayed steps and a rollback's pass.
    max_steps: int | None = None
    # durable_max_child_depth and durable_max_map_items: a deeper child or a larger map
    # fails the run before anything of it is stored; None: no limit.
    max_child_depth: int | None = None
    max_map_items: int | None = None
    # What wraps each step this delivery runs (see StepGuard), in order, outermost first.
    step_guards: tuple[StepGuard, ...] = ()
    # A guard's way to write the record of the step it wraps, in the record's one
    # statement (a limiter keeping its slot for the next step); None from it, or no
    # guard's: the plain record.
    record_with: Callable[[StepRecord], StepWrite | None] | None = None
    # Each feature's state for this run, under a key of its own (see wing_state).
    wings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def wing_state(self, key: str, make: Callable[[], T]) -> T:
        """The state feature ``key`` keeps for this run: made with ``make`` at first use."""
        state = self.wings.get(key)
        if state is None:
            state = self.wings[key] = make()
        return state  # type: ignore[no-any-return]

    def defer(self, record: StepRecord) -> None:
        if not self.deferred:
            self.deferred_since = time.monotonic()
        self.deferred.append(record)
        self.history[record.idx] = record

    def deferred_due(self) -> bool:
        """The buffer reached a bound: write it now, without waiting for the next write."""
        return bool(self.deferred) and (
            len(self.deferred) >= self.deferred_max_steps
            or time.monotonic() - self.deferred_since >= self.deferred_max_age
        )

    def take_deferred(self) -> list[StepRecord]:
        """The buffered records, for the write that carries them (the buffer empties)."""
        taken, self.deferred = self.deferred, []
        return taken

    @classmethod
    def current(cls) -> WorkflowContext | None:
        """The context of the running workflow, or None outside a workflow."""
        return _current.get()

    @classmethod
    def is_active(cls) -> bool:
        """True when called from inside a workflow body (or a step it runs)."""
        return _current.get() is not None

    @property
    def replaying(self) -> bool:
        """True while the body is re-executing steps that history already holds."""
        return self.next_index in self.history

    def stop(self, exc: BaseException) -> BaseException:
        """Remember why the body stops; returns ``exc`` for ``raise ctx.stop(...)``."""
        if self.stopping is None:
            self.stopping = exc
        return self.stopping

    def check_stopping(self) -> None:
        if self.stopping is not None:
            raise self.stopping

    def take_index(self, *, bounded: bool = True) -> int:
        """The next step's index. ``bounded``: a new step past ``max_steps`` fails the run
        (False for a rollback, which must run whatever the body's length)."""
        # A patch marker the code no longer asks for (its patched()/deprecate_patch() call
        # was removed) is passed over, as Temporal does.
        while _is_patch_marker(self.history.get(self.next_index)):
            self.next_index += 1
        index = self.next_index
        if bounded and self.max_steps is not None and index >= self.max_steps:
            if index not in self.history:
                # Through stop(): a body that catches it still fails, at its next step or end.
                raise self.stop(self.too_many_steps(index))
        self.next_index += 1
        for guard in self.step_guards:
            guard.index_taken(self, index)
        return index

    def too_many_steps(self, index: int) -> RunLimitExceeded:
        return RunLimitExceeded(
            f"workflow run {self.run_id!r} reached durable_max_steps={self.max_steps} "
            f"recorded steps (step {index} refused, nothing of it stored); a run that loops "
            "should call celery_durable.continue_as_new(...) to go on with a fresh history, "
            "or raise durable_max_steps"
        )

    @property
    def workflow_id(self) -> str:
        """The older name of ``run_id``, kept as an alias."""
        return self.run_id

    def log_fields(self, step_index: int | None = None) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow_id": self.run_id,  # its older name, for one release
            "workflow": self.workflow_name,
            "attempt": self.attempt,
            "step_index": self.next_index if step_index is None else step_index,
        }


def _is_patch_marker(record: StepRecord | None) -> bool:
    return record is not None and record.name.startswith(PATCH_STEP_PREFIX)


@dataclasses.dataclass
class StepCall:
    """One try of the step running now, as a wing inside it sees it (a stream write
    knows where it was made): the step's index, and each wing's state for this try, made
    anew for each in-process retry."""

    index: int
    wings: dict[str, Any] = dataclasses.field(default_factory=dict)
    # What a wing must finish before this try's outcome is recorded (a stream's buffered
    # values stored), each called with whether the try failed: see ``finish``.
    before_record: list[Callable[[bool], None]] = dataclasses.field(default_factory=list)

    def finish(self, failed: bool) -> None:
        """Finish what the wings left in flight during this try. After a try that
        returned, their error is the step's; after one that failed, they log theirs."""
        for finish in self.before_record:
            finish(failed)


# The step running now in this context (a sync step's try, an async step's task and the
# threads it starts): set by ``body.step`` around each try; None in a body.
RUNNING_STEP: contextvars.ContextVar[StepCall | None] = contextvars.ContextVar(
    "celery_durable_running_step", default=None
)


@dataclasses.dataclass
class FailedStep:
    """A step failure the body raised, and whether its record is written yet."""

    record: StepRecord
    exc: BaseException
    written: bool = False


def enter_body(what: str, instead: str | None = None) -> WorkflowContext:
    """The running body's context, for the body API ``what`` (``"cd.gather()"``): a clear
    error (saying what to do ``instead``) outside a workflow or inside a step, and the
    body's stop raised again once it must stop."""
    ctx = _current.get()
    if ctx is None:
        hint = f"; {instead}" if instead else ""
        raise RuntimeError(f"{what} can only be called inside a workflow{hint}")
    if ctx.in_step or IN_ASYNC_STEP.get():
        raise RuntimeError(f"{what} can't be called inside a step; call it from the workflow body")
    ctx.check_stopping()
    return ctx


def activate(ctx: WorkflowContext) -> contextvars.Token[WorkflowContext | None]:
    return _current.set(ctx)


def deactivate(token: contextvars.Token[WorkflowContext | None]) -> None:
    _current.reset(token)
