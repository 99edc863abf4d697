"""What the store's operations commands take and return (``list``, ``stats``, ``show``,
``resume``, ``fork``, ``gc``): plain records, apart from the hot path's in ``records``.

Example::

    page = store.list_runs(RunFilter(statuses=("FAILED",)), limit=51)
"""

from __future__ import annotations

import dataclasses

from celery_durable.store.records import DueRun

# -- operations (list, stats) ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunFilter:
    """Which runs ``list_runs`` pages through; every field narrows, None or empty: all.

    ``after`` is the keyset position of the previous page's last run, ``(created_at, id)``:
    the page goes on from there, newest first, whatever was inserted meanwhile.
    """

    statuses: tuple[str, ...] = ()
    workflow: str | None = None
    since: float | None = None  # created_at >= since
    until: float | None = None  # created_at < until
    after: tuple[float, str] | None = None


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """One run in a listing."""

    id: str
    name: str
    status: str
    attempts: int
    max_attempts: int
    recoveries: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    wait_signal: str | None
    error: str | None
    cancel_reason: str | None
    forked_from: str | None
    cancel_requested: bool = False


@dataclasses.dataclass(frozen=True)
class StatusCount:
    """How many runs of one workflow have one status. ``recoveries``: lost workers of its
    PENDING and RUNNING runs (None for the others: counting them would read every row)."""

    workflow: str
    status: str
    runs: int
    recoveries: int | None


@dataclasses.dataclass(frozen=True)
class OldestRun:
    """The oldest run of a status: how long the queue or a wait has been stuck."""

    id: str
    name: str
    status: str
    created_at: float
    updated_at: float
    wait_signal: str | None


@dataclasses.dataclass(frozen=True)
class RunStats:
    """``run_stats``: counts by workflow and status, the oldest pending (ready, not yet
    claimed) and waiting runs, and the due backlog (runs the sweeper should have taken)."""

    now: float
    counts: tuple[StatusCount, ...]
    oldest_pending: OldestRun | None
    oldest_waiting: OldestRun | None
    due: int
    oldest_due_at: float | None


# -- operations (show) ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PendingSignal:
    """A signal stored for a run and not consumed yet."""

    name: str
    created_at: float
    idempotency_key: str | None


@dataclasses.dataclass(frozen=True)
class StateKey:
    """A key the run published with ``set_state``, and when it last did."""

    key: str
    updated_at: float


@dataclasses.dataclass(frozen=True)
class RunAction:
    """What an operator did to a run (cancel, resume, fork, signal), and who: the
    dashboard's basic-auth user or the Django user; None when nobody authenticated."""

    action: str
    actor: str | None
    detail: str | None
    created_at: float


# -- operations (resume, fork) ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Resumed:
    """The outcome of ``resume_run``.

    ``status``: the run's status before (None: no such run); ``run``: what to publish,
    set only when the run was resumed; ``attempts``: the attempts it had used;
    ``from_step``: its first unfinished step; ``dropped_step``: the failed step that ended
    it, whose record was removed so that it runs again (None if the run did not end at a
    step).
    """

    status: str | None
    run: DueRun | None = None
    attempts: int = 0
    from_step: int = 0
    dropped_step: int | None = None


@dataclasses.dataclass(frozen=True)
class Forked:
    """The outcome of ``fork_run``.

    ``status``: the origin's status (None: no such run); ``finished``: how many of its
    steps, from the first, are finished and may be kept (the largest ``from_step``);
    ``run``: the new run to publish, None when refused (``from_step`` beyond
    ``finished``, or ``taken``: the new id exists); ``signals``: the names of the
    unconsumed signals copied to the new run.
    """

    status: str | None
    finished: int = 0
    run: DueRun | None = None
    taken: bool = False
    signals: tuple[str, ...] = ()


# -- operations (gc) --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Collected:
    """Finished runs (by status) and their rows that ``gc_runs`` deleted, or that
    ``count_collectable`` counts."""

    runs: dict[str, int] = dataclasses.field(default_factory=dict)
    steps: int = 0
    signals: int = 0
    state: int = 0
    before: float | None = None  # the cutoff: runs that finished before it

    @property
    def total(self) -> int:
        return sum(self.runs.values())

    def __add__(self, other: Collected) -> Collected:
        runs = dict(self.runs)
        for status, count in other.runs.items():
            runs[status] = runs.get(status, 0) + count
        return Collected(
            runs,
            self.steps + other.steps,
            self.signals + other.signals,
            self.state + other.state,
            self.before if self.before is not None else other.before,
        )
