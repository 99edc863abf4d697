"""Operations on runs without writing SQL: list, stats, show, resume, fork, gc, retention.

The implementation beneath the operator API (``ops.operations.Operations``, which a
``Durable`` is): the CLI, the dashboard and the Django admin reach these through it, and a
handle's ``resume`` and ``fork`` call them directly (``runs`` sits below ``ops``).

Example::

    page = durable.list_runs(status="failed", workflow="shop.checkout", since="2h")
    for run in page.runs:
        print(run.id, run.status)
    more = durable.list_runs(status="failed", after=page.cursor) if page.cursor else None
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from celery_durable.core import validate
from celery_durable.core.ids import time_ordered_id
from celery_durable.core.logs import run_fields
from celery_durable.engine.publish import publish_or_leave
from celery_durable.engine.retention import log_collected
from celery_durable.errors import (
    InvalidArgument,
    WorkflowAlreadyExists,
    WorkflowNotFound,
    WorkflowNotResumable,
)
from celery_durable.store import (
    ALL_STATUSES,
    FINISHED_STATUSES,
    Collected,
    Forked,
    PendingSignal,
    Resumed,
    RunAction,
    RunFilter,
    RunRecord,
    RunStats,
    RunSummary,
    StateKey,
    StepRecord,
)
from celery_durable.store.areas import LIMITER_USAGE, STATE_READS, LimiterFigures
from celery_durable.store.reads import count_steps, steps_page

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.operations")

MAX_PAGE = 1000
RESUMABLE = ("FAILED", "CANCELLED")
GC_BATCH = 500


@dataclasses.dataclass(frozen=True)
class RunPage:
    """One page of ``list_runs``: the runs, newest first, and the cursor of the next page
    (pass it as ``after=``), or None when this page is the last."""

    runs: list[RunSummary]
    cursor: str | None


def cursor_of(run: RunSummary) -> str:
    """The keyset position just after ``run``: an opaque, URL-safe string."""
    raw = json.dumps([run.created_at, run.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_cursor(cursor: str, argument: str = "after") -> tuple[float, str]:
    """The ``(created_at, id)`` a cursor from ``cursor_of`` stands for."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = json.loads(raw)
        if isinstance(created_at, int | float) and math.isfinite(created_at):
            if isinstance(run_id, str):
                return float(created_at), run_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise InvalidArgument(
        f"{argument}={validate.show(cursor)} is not a cursor given by list_runs"
    ) from None


def parse_statuses(status: str | Iterable[str] | None, argument: str = "status") -> tuple[str, ...]:
    """``"failed,waiting"`` or ``["FAILED", "waiting"]`` as known statuses, upper case."""
    if status is None:
        return ()
    names = status.split(",") if isinstance(status, str) else list(status)
    wanted = []
    for name in names:
        upper = str(name).strip().upper()
        if upper not in ALL_STATUSES:
            raise InvalidArgument(
                f"{argument}={validate.show(name)} is not a run status: use "
                f"{', '.join(s.lower() for s in ALL_STATUSES)}"
            )
        if upper not in wanted:
            wanted.append(upper)
    return tuple(wanted)


def run_filter(
    runtime: Runtime,
    *,
    status: str | Iterable[str] | None = None,
    workflow: str | None = None,
    since: Any = None,
    until: Any = None,
    after: str | None = None,
) -> RunFilter:
    """Check and resolve a listing's filters (``since``/``until`` against the database's
    clock, which stamped the runs)."""
    statuses = parse_statuses(status)
    if workflow is not None:
        validate.check_text(workflow, "workflow", max_chars=255, allow_empty=False)
    now = runtime.store.now() if since is not None or until is not None else 0.0
    return RunFilter(
        statuses=statuses,
        workflow=workflow,
        since=None if since is None else validate.parse_moment(since, "since", now),
        until=None if until is None else validate.parse_moment(until, "until", now),
        after=None if after is None else parse_cursor(after),
    )


def list_runs(runtime: Runtime, *, limit: int = 50, **filters: Any) -> RunPage:
    """A page of runs, newest first; see ``Durable.list_runs``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit={limit!r} must be an int from 1 to {MAX_PAGE}")
    wanted = run_filter(runtime, **filters)
    # One more than asked: whether a next page exists, without a count.
    runs = runtime.store.list_runs(wanted, limit + 1)
    if len(runs) <= limit:
        return RunPage(runs, None)
    return RunPage(runs[:limit], cursor_of(runs[limit - 1]))


def stats(runtime: Runtime) -> RunStats:
    """Counts by workflow and status, the oldest pending and waiting runs, the due backlog."""
    return runtime.store.run_stats()


@dataclasses.dataclass(frozen=True)
class RunDetails:
    """Everything ``durable show`` prints about one run."""

    run: RunRecord
    steps: list[StepRecord]  # one page of them: see step_count and steps_from
    pending_signals: list[PendingSignal]
    state_keys: list[StateKey]
    step_count: int = 0  # every step the run recorded
    steps_from: int = 0  # the index the page starts at
    next_steps_from: int | None = None  # where the next page starts; None: no more steps
    # What operators did to it (dashboard, Django admin), and who.
    actions: list[RunAction] = dataclasses.field(default_factory=list)


def limiter_usage(runtime: Runtime) -> Sequence[LimiterFigures]:
    """Each key of each limiter: in use, waiting, the oldest wait; for the limits this
    process declares (a limiter only another app declares shows its counts). Read through
    the limiters area (``LIMITER_USAGE``)."""
    limits = {name: limiter.limit for name, limiter in runtime.limiters.items()}
    return LIMITER_USAGE.of(runtime.store).limiter_usage(limits)


def describe_run(
    runtime: Runtime, run_id: str, steps_from: int | None = 0, steps_limit: int = 0
) -> RunDetails | None:
    """The run, a page of its steps (in order, with durations), its unconsumed signals and
    the keys it published with ``set_state``; None if there is no such run.

    ``steps_limit`` steps from index ``steps_from`` on (0: all of them); ``steps_from``
    None: the last page, where a running run is now. The page is read by index range, so
    a history of 100,000 steps costs what a page does."""
    store = runtime.store
    run = store.get_run(run_id)
    if run is None:
        return None
    count = count_steps(store, run_id)
    first = steps_from if steps_from is not None else max(0, count - (steps_limit or count))
    # One step past the page tells whether another page follows.
    steps = steps_page(store, run_id, first, steps_limit + 1 if steps_limit else count + 1)
    later = steps.pop().idx if steps_limit and len(steps) > steps_limit else None
    return RunDetails(
        run,
        steps,
        store.pending_signals(run_id),
        store.state_keys(run_id),
        step_count=count,
        steps_from=first,
        next_steps_from=later,
        actions=store.run_actions(run_id),
    )


# What an operator can do to a run, as the actions log names it.
ACTIONS = ("cancel", "resume", "fork", "signal")


def record_action(
    runtime: Runtime, run_id: str, action: str, actor: str | None, detail: str | None = None
) -> None:
    """Note in the run's actions log that ``actor`` (a user name; None: nobody
    authenticated) did ``action`` (one of ACTIONS), after it was done; ``detail``: what
    it said (the cancel's reason, the fork's new run, the signal's name)."""
    if action not in ACTIONS:
        raise InvalidArgument(f"action={action!r} must be one of {', '.join(ACTIONS)}")
    actor = None if actor is None else str(actor)[:255]
    runtime.store.record_action(run_id, action, actor, detail)
    logger.info(
        "workflow run %s: %s by %s%s",
        run_id,
        action,
        actor or "an unauthenticated user",
        f" ({detail})" if detail else "",
        extra=run_fields(run_id),
    )


def resume_run(runtime: Runtime, run_id: str, timeout: Any = None) -> Resumed:
    """FAILED or CANCELLED -> PENDING, published; see ``WorkflowHandle.resume``.
    ``timeout``: its new deadline from now (seconds, "2h", a timedelta); None: none."""
    validate.check_run_id(run_id)
    seconds = None if timeout is None else validate.parse_duration(timeout, "timeout")
    resumed = runtime.store.resume_run(run_id, runtime.config.dispatch_grace, seconds)
    if resumed.status is None:
        raise WorkflowNotFound(run_id)
    if resumed.run is None:
        raise WorkflowNotResumable(run_id, resumed.status)
    run = resumed.run
    fields = run_fields(run_id, run.name, resumed.attempts, resumed.from_step)
    logger.info(
        "workflow %s run %s resumed (was %s after attempt %d): continues at step %d%s",
        run.name,
        run_id,
        resumed.status,
        resumed.attempts,
        resumed.from_step,
        "" if resumed.dropped_step is None else ", which failed and runs again",
        extra=fields,
    )
    publish(runtime, run.id, run.name, run.args, run.queue, fields)
    return resumed


def publish(
    runtime: Runtime, run_id: str, name: str, args: str, queue: str | None, fields: dict[str, Any]
) -> None:
    """Publish a run this process made PENDING; a failed publish is left to the sweeper
    (the run is due after durable_dispatch_grace), never lost."""
    publish_or_leave(
        lambda: runtime.publish(run_id, name, args, queue),
        logger,
        "workflow %s run %s",
        name,
        run_id,
        fields=fields,
        level=logging.WARNING,
    )


@dataclasses.dataclass(frozen=True)
class BulkResume:
    """What ``resume_runs`` did: the runs resumed (or, with ``dry_run``, that would be),
    and those that changed status meanwhile and were left alone."""

    resumed: list[RunSummary]
    skipped: list[tuple[RunSummary, str]]


def resume_runs(
    runtime: Runtime,
    *,
    workflow: str,
    status: str | Iterable[str] = "failed",
    since: Any = None,
    until: Any = None,
    dry_run: bool = False,
) -> BulkResume:
    """Resume every run ``list_runs`` gives for these filters (FAILED or CANCELLED runs of
    one workflow), after a fix is deployed. Running it again resumes nothing more."""
    statuses = parse_statuses(status)
    if not statuses or set(statuses) - set(RESUMABLE):
        raise InvalidArgument(
            f"status={validate.show(status)}: only failed and cancelled runs can be resumed"
        )
    filters = run_filter(runtime, status=statuses, workflow=workflow, since=since, until=until)
    resumed: list[RunSummary] = []
    skipped: list[tuple[RunSummary, str]] = []
    page = runtime.store.list_runs(filters, MAX_PAGE)
    while page:
        for run in page:
            if dry_run:
                resumed.append(run)
                continue
            try:
                resume_run(runtime, run.id)
            except (WorkflowNotResumable, WorkflowNotFound) as exc:
                skipped.append((run, getattr(exc, "status", "gone")))
            else:
                resumed.append(run)
        # The keyset goes on from the last run seen, however the resumed ones changed.
        last = page[-1]
        page = runtime.store.list_runs(
            dataclasses.replace(filters, after=(last.created_at, last.id)), MAX_PAGE
        )
    return BulkResume(resumed, skipped)


def fork_run(
    runtime: Runtime,
    run_id: str,
    from_step: int,
    new_run_id: str | None = None,
    timeout: Any = None,
) -> Forked:
    """A new run keeping ``run_id``'s steps before ``from_step`` and its unconsumed
    signals; see ``WorkflowHandle.fork``. Returns the fork (``run``, published, and
    ``signals``, the names of those it took)."""
    validate.check_run_id(run_id)
    if isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0:
        raise InvalidArgument(f"from_step={from_step!r} must be a step index (an int >= 0)")
    if new_run_id is None:
        new_run_id = time_ordered_id()
    validate.check_run_id(new_run_id, "new_run_id")
    seconds = None if timeout is None else validate.parse_duration(timeout, "timeout")
    forked = runtime.store.fork_run(
        run_id, new_run_id, from_step, runtime.config.dispatch_grace, seconds
    )
    if forked.status is None:
        raise WorkflowNotFound(run_id)
    if forked.taken:
        raise WorkflowAlreadyExists(new_run_id)
    if forked.run is None:
        finished = (
            f"steps 0 to {forked.finished - 1} finished" if forked.finished else "no step finished"
        )
        raise InvalidArgument(
            f"from_step={from_step} is beyond the recorded steps of workflow run {run_id!r}: "
            f"{finished}, so from_step can be 0 to {forked.finished}"
        )
    run = forked.run
    fields = run_fields(run.id, run.name, 0, from_step)
    logger.info(
        "workflow %s run %s forked from run %s at step %d (steps before it kept, %d "
        "unconsumed signal(s) taken)",
        run.name,
        run.id,
        run_id,
        from_step,
        len(forked.signals),
        extra=fields,
    )
    publish(runtime, run.id, run.name, run.args, run.queue, fields)
    return forked


def gc(
    runtime: Runtime,
    older_than: Any,
    status: str | Iterable[str] | None = None,
    dry_run: bool = False,
    batch: int = GC_BATCH,
) -> Collected:
    """Delete finished runs that finished more than ``older_than`` ago; see
    ``Durable.gc``."""
    seconds = validate.parse_duration(older_than, "older_than")
    statuses = parse_statuses(status) or FINISHED_STATUSES
    if set(statuses) - set(FINISHED_STATUSES):
        raise InvalidArgument(
            f"status={validate.show(status)}: gc deletes only finished runs (succeeded, "
            "failed, cancelled); a pending, running or waiting run is never deleted"
        )
    store = runtime.store
    cutoff = store.now() - seconds
    total = Collected(before=cutoff)
    for finished in statuses:
        if dry_run:
            total += store.count_collectable(finished, cutoff)
            continue
        while True:
            deleted = store.gc_runs(finished, cutoff, batch)
            total += deleted
            if deleted.total < batch:
                break
    # Signals whose run is gone or never existed: no run's deletion takes them.
    if dry_run:
        total += Collected(signals=STATE_READS.of(store).count_orphan_signals(cutoff))
    else:
        while (orphans := STATE_READS.of(store).gc_orphan_signals(cutoff, batch)) > 0:
            total += Collected(signals=orphans)
            if orphans < batch:
                break
    if not dry_run:
        log_collected("gc", total, older_than)
    return total
