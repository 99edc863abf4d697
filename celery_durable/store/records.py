"""What the store takes and returns: plain records, and the outcomes of its fenced writes.

Example::

    written = store.record_step(run_id, fence, StepRecord(0, "shop.reserve", "ok", "[]", "1", None))
    if written.outcome is Outcome.LEASE_LOST: ...
"""

from __future__ import annotations

import dataclasses
import enum


class Outcome(str, enum.Enum):
    """How a write that depends on the run's state went."""

    RECORDED = "recorded"  # written
    EXISTS = "exists"  # an earlier write of the same step committed: its row is returned
    LEASE_LOST = "lease_lost"  # another worker owns the run now (stale fencing token)
    CANCELLED = "cancelled"  # the run's cancellation was requested
    SUSPENDED = "suspended"  # the run now waits
    SIGNALLED = "signalled"  # a matching signal was already there: the run did not suspend
    NO_SIGNAL = "no_signal"  # nothing to consume yet
    STORED = "stored"  # a signal was stored
    DUPLICATE = "duplicate"  # a signal with this idempotency key was stored before
    NOT_FOUND = "not_found"  # no such run
    FULL = "full"  # the run holds durable_max_pending_signals unconsumed signals
    FINISHED = "finished"  # the run has finished; see the status beside the outcome
    SETTLED = "settled"  # every awaited item had settled: the run did not suspend


@dataclasses.dataclass(frozen=True)
class NewRun:
    id: str
    name: str
    args: str
    queue: str | None
    max_attempts: int
    retry_backoff: float
    dispatch_grace: float
    # Seconds before the run may start (countdown/eta): the sweeper publishes it then.
    start_delay: float | None = None
    # A child run: its parent and the parent's step index that started it.
    parent_id: str | None = None
    parent_idx: int | None = None
    # What it tells Celery when it settles (engine.canvas), as JSON; None: nothing.
    canvas: str | None = None
    # Orders its waits for a limiter's slot, highest first.
    priority: int = 0
    # Names an active run of its workflow (apply_async(dedup_key=)); its deadline, in
    # seconds from the start (timeout=).
    dedup_key: str | None = None
    timeout: float | None = None


@dataclasses.dataclass(frozen=True)
class Claim:
    fence: int
    attempts: int
    max_attempts: int
    retry_backoff: float
    args: str
    has_steps: bool
    # Where the run's remote steps go when theirs has no queue; the parent of a child run.
    queue: str | None = None
    parent_id: str | None = None
    parent_idx: int | None = None
    # The run had its cancellation requested (a saga handed back to roll back), and it
    # finished a step with a compensation.
    cancel_requested: bool = False
    compensable: bool = False
    # What it tells Celery when it settles (engine.canvas), as JSON; None: nothing.
    canvas: str | None = None
    # Orders its waits for a limiter's slot, highest first.
    priority: int = 0
    # When it is cancelled, "deadline exceeded" (epoch seconds, the database's clock).
    deadline_at: float | None = None
    # Times it was taken from a worker that lost it (its lease out, its owner gone).
    recoveries: int = 0


@dataclasses.dataclass(frozen=True)
class StepRecord:
    idx: int
    name: str
    status: str  # "ok", "error", "retry" (runs again on the next attempt) or "waiting"
    input: str
    output: str | None
    error: str | None
    # Seconds the step took (its function, in-process retries included) or, for a wait,
    # waited; None when not measured (steps recorded before this column existed).
    duration: float | None = None
    # When the step began (its first try; a wait: when it began waiting; a fan-out step:
    # when it was dispatched), on the database's clock; None for rows from before
    # migration 0006.
    started_at: float | None = None
    # The run's attempt that ran the step (a wait or fan-out step: the one that began it).
    attempt: int | None = None
    # Not stored: ``time.monotonic()`` in the writing process when the step began. The
    # write turns it into ``started_at`` (the database's clock minus the time since), so a
    # deferred step's record, written later, still says when the step ran.
    began: float | None = dataclasses.field(
        default=None, compare=False, repr=False, metadata={"stored": False}
    )


@dataclasses.dataclass(frozen=True)
class StepWrite:
    """The outcome of ``record_step``; ``stored`` is the row already there for EXISTS."""

    outcome: Outcome
    stored: StepRecord | None = None


@dataclasses.dataclass(frozen=True)
class SignalTake:
    """The outcome of ``consume_signal``; ``payload`` is set for RECORDED."""

    outcome: Outcome
    payload: str | None = None


@dataclasses.dataclass(frozen=True)
class SignalStore:
    """The outcome of ``insert_signal``; ``status`` names the run's for FINISHED."""

    outcome: Outcome
    status: str | None = None


def attempt_of(attempts: int, started_at: float | None) -> int:
    """The attempt a run is on, or ended on: a suspension (a wait) gives its attempt back,
    so a run that ran counts at least one."""
    return max(attempts, 1 if started_at is not None else 0)


@dataclasses.dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    status: str
    queue: str | None
    args: str
    attempts: int
    max_attempts: int
    recoveries: int
    dispatches: int
    fence: int
    owner: str | None
    result: str | None
    error: str | None
    cancel_requested: bool
    cancel_reason: str | None
    wait_signal: str | None
    due_at: float | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    parent_id: str | None = None
    parent_idx: int | None = None
    wait_items: bool = False
    forked_from: str | None = None
    forked_from_step: int | None = None
    compensable: bool = False
    compensation: str | None = None
    generation: int = 0
    continued_from: str | None = None
    continued_as: str | None = None
    canvas: str | None = None
    wait_limiter: str | None = None
    priority: int | None = None
    dedup_key: str | None = None
    deadline_at: float | None = None

    @property
    def attempt(self) -> int:
        """The attempt the run is on, or ended on (``durable show``'s "attempt 1/3"), where
        ``attempts`` counts those used up: 0 for a run whose wait gave its attempt back."""
        return attempt_of(self.attempts, self.started_at)


@dataclasses.dataclass(frozen=True)
class DueRun:
    id: str
    name: str
    status: str
    args: str
    queue: str | None
    parent_id: str | None = None
    parent_idx: int | None = None


@dataclasses.dataclass(frozen=True)
class Cancellation:
    """The outcome of ``cancel_run``: whether it was requested now, the status after it
    (None: no such run) and the parents its cancelled children woke (to publish)."""

    requested: bool
    status: str | None
    woken: tuple[DueRun, ...] = ()


# -- items: the sub-records of a fan-out step (parallel items, remote steps, children) ----


@dataclasses.dataclass(frozen=True)
class FanOut:
    """What a fan-out step inserts with its step row: its items, or one child run."""

    name: str  # the step each item runs (a child's item: celery_durable.child:<workflow>)
    queue: str | None
    inputs: list[str]  # each item's encoded [args, kwargs], in item order
    grace: float  # seconds a published item may wait before the sweeper publishes it again
    child: NewRun | None = None
    detached: bool = False
    batch_size: int = 1  # items to a task; their publish lost, they go again alike


@dataclasses.dataclass(frozen=True)
class ItemClaim:
    """A claimed item: "running" (run it) or "cancelled" (its run is cancelled or over)."""

    status: str
    name: str
    input: str
    attempts: int


@dataclasses.dataclass(frozen=True)
class ItemWrite:
    """The outcome of recording an item: RECORDED, or LEASE_LOST when another claim or
    an earlier write won; ``woken``: the parent run it made ready, for the caller to
    publish."""

    outcome: Outcome
    woken: DueRun | None = None


@dataclasses.dataclass(frozen=True)
class DueItem:
    run_id: str
    idx: int
    item: int
    name: str
    queue: str | None
    dispatches: int  # counting the one the sweep is taking it for
    attempts: int
    recoveries: int
    batch_size: int | None  # the batch it was first published in (None: alone)

    @property
    def never_started(self) -> bool:
        """Not attempted yet: its message was lost or still waits in its queue, or a
        shutdown gave it back. No recovery either (a recovered item goes alone)."""
        return self.attempts == 0 and self.recoveries == 0


@dataclasses.dataclass(frozen=True)
class LostItem:
    """A running item whose worker was lost too often: the sweeper fails it."""

    run_id: str
    idx: int
    item: int
    owner: str


# The settled states of an item that hold no output: failed for good, cancelled with its
# run (or a child cancelled), revoked by its task id.
ITEM_FAILED = ("error", "cancelled", "revoked")


@dataclasses.dataclass(frozen=True)
class ItemFailure:
    status: str  # one of ITEM_FAILED
    error: str | None  # the encoded error (for a cancelled item or child: its reason)


@dataclasses.dataclass
class FanOutState:
    """The items of one fan-out step as stored: raw JSON outputs in item order (None when
    unsettled or failed), the failures, and how many are still unsettled."""

    outputs: list[str | None]
    failures: dict[int, ItemFailure]
    unsettled: int
    child_id: str | None = None


@dataclasses.dataclass(frozen=True)
class ItemRow:
    """One item as ``celery -A app durable show`` lists it."""

    idx: int
    item: int
    name: str
    status: str
    attempts: int
    child_id: str | None
    child_status: str | None
    queue: str | None
    dispatches: int  # messages published for it; pending with attempts 0: not started

    @property
    def not_started(self) -> bool:
        """Published to its queue, never started: waiting for a worker of ``queue``."""
        return (
            self.status == "pending"
            and self.attempts == 0
            and self.dispatches > 0
            and self.child_id is None
        )


@dataclasses.dataclass(frozen=True)
class OwedReport:
    """A settled run that still owes Celery its report (its outbox entry)."""

    id: str
    name: str
    status: str
    args: str
    result: str | None
    error: str | None
    cancel_reason: str | None
    canvas: str | None


@dataclasses.dataclass(frozen=True)
class Settled:
    """One item's outcome in a batch's record: "ok" or "error" with its output or error,
    or "retry" (back to pending, due in ``delay`` seconds, ``error`` the failure)."""

    item: int
    status: str
    output: str | None = None
    error: str | None = None
    delay: float = 0.0


@dataclasses.dataclass(frozen=True)
class BatchWrite:
    """What a batch's record wrote: the items recorded (the others had been revoked or
    taken over meanwhile), and the parent run it woke, for the caller to publish."""

    recorded: list[int]
    woken: DueRun | None = None
