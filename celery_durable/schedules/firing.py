"""Firing schedules: each poll, a sweeper locks the schedules with a firing time due (another
sweeper skips them), decides what each due firing time comes to (catch-up, overlap), and in the
same transaction records each firing time and inserts its run, whose id,
``schedule:<name>:<firing time in UTC>``, is the same in every process. The runs are published
once that commits; a publish lost with its worker is the sweeper's, as for any run.

So each firing time fires once however many workers and app processes declare the schedule: the
firing time's row and the run's id are both taken by one transaction only.

Example::

    started = fire_due(runtime)           # the sweeper's pass
    handle = trigger(runtime, "report-eu")  # an operator's run, now
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from celery_durable.core import serialization
from celery_durable.core.ids import time_ordered_id
from celery_durable.engine.cancel import cancel
from celery_durable.errors import InvalidArgument
from celery_durable.runs.task import WorkflowTask
from celery_durable.schedules.declared import (
    FIRING_ARGUMENT,
    ScheduleSpec,
    build_spec,
    register,
    sync,
    timing_of,
)
from celery_durable.schedules.firing_times import UTC, Schedule, firing_text, zone
from celery_durable.schedules.store import SCHEDULES, ScheduleRow, SchedulesArea
from celery_durable.store import ACTIVE_STATUSES

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.schedules")

BATCH = 100  # schedules locked by one transaction
MOST_FIRINGS = 100  # firing times of one schedule fired by one poll ("all" catches up over polls)
COUNTED = 1000  # missed firing times counted per gap, at most
# Seconds the oldest due firing time may be late before its schedule counts as having missed it.
ON_TIME = 5.0
_TICK = dt.timedelta(microseconds=1)

Publish = Callable[[], None]


def run_id_of(name: str, fire_at: dt.datetime) -> str:
    return f"schedule:{name}:{firing_text(fire_at)}"


@dataclasses.dataclass
class _Firing:
    """One schedule's state while its due firing times are decided."""

    row: ScheduleRow
    active: bool
    last_slot: float | None
    last_run_id: str | None
    buffered: float | None
    skipped: int = 0
    missed: int = 0


def fire_due(runtime: Runtime, batch: int = BATCH, now: float | None = None) -> int:
    """The sweeper's pass: fire every due firing time of the schedules this worker can start,
    as of ``now`` (None: the database's clock; tests inject one); returns the runs
    started."""
    publishes: list[Publish] = []
    cancels: list[tuple[str, str]] = []
    workflows = sorted(runtime.workflows)
    with SCHEDULES.of(runtime.store).due_schedules(workflows, batch, now) as (conn, due):
        for row in due:
            task = _task(runtime, row.workflow)
            if task is None:
                continue  # a worker whose code has the workflow fires it
            publishes += _fire(runtime, conn, task, row, cancels)
    for run_id, name in cancels:
        cancel(runtime, run_id, f"cancelled by the next firing time of schedule {name!r}")
    for publish in publishes:
        publish()
    return len(publishes)


def _task(runtime: Runtime, workflow: str) -> WorkflowTask | None:
    task = runtime.app.tasks.get(workflow) if workflow in runtime.workflows else None
    return task if isinstance(task, WorkflowTask) else None


def _due_firings(
    row: ScheduleRow, timing: Schedule, state: _Firing, on_time: float
) -> Iterator[dt.datetime]:
    """The firing times to fire now, oldest first. While the oldest firing time due is at most
    ``on_time`` seconds late, the schedule kept up (a slow poll): every due firing time fires.
    Later than that, every worker (or the database) was down, and the catch-up policy
    decides: "latest" fires the most recent firing time only, "all" those of its window, "none"
    only the firing times not yet ``on_time`` late."""
    if row.next_slot is None or row.next_slot > row.now:
        return
    now = dt.datetime.fromtimestamp(row.now, UTC)
    after = dt.datetime.fromtimestamp(row.next_slot, UTC) - _TICK
    if row.now - row.next_slot <= on_time:
        yield from _walk(timing, after, now)
        return
    if row.catchup == "latest":
        gap = timing.between(after, now, COUNTED)
        state.missed += len(gap) - 1
        yield from gap[-1:]
        return
    kept = on_time if row.catchup == "none" else row.catchup_window
    floor = max(after, now - dt.timedelta(seconds=kept))
    state.missed += len(timing.between(after, floor, COUNTED)) if floor > after else 0
    yield from _walk(timing, floor, now)


def _walk(timing: Schedule, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    """The firing times in ``(after, until]``, oldest first, at most MOST_FIRINGS."""
    fire_times: list[dt.datetime] = []
    fire_at = timing.next_after(after)
    while fire_at <= until and len(fire_times) < MOST_FIRINGS:
        fire_times.append(fire_at)
        fire_at = timing.next_after(fire_at)
    return fire_times


def _fire(
    runtime: Runtime,
    conn: Connection,
    task: WorkflowTask,
    row: ScheduleRow,
    cancels: list[tuple[str, str]],
) -> list[Publish]:
    schedules, timing = SCHEDULES.of(runtime.store), timing_of(row)
    state = _Firing(
        row, row.last_status in ACTIVE_STATUSES, row.last_slot, row.last_run_id, row.buffered_slot
    )
    publishes: list[Publish] = []
    if state.buffered is not None and not state.active:
        fire_at = dt.datetime.fromtimestamp(state.buffered, UTC)
        state.buffered = None
        publishes += _start(runtime, conn, task, row, fire_at, state)
    fired_last: dt.datetime | None = None
    on_time = max(ON_TIME, 3 * runtime.config.poll_interval)
    for fire_at in _due_firings(row, timing, state, on_time):
        fired_last = fire_at
        if state.active and row.overlap == "skip":
            _skip(schedules, conn, row, fire_at, state)
        elif state.active and row.overlap == "buffer_one":
            if state.buffered is None:
                state.buffered = fire_at.timestamp()
            else:
                _skip(schedules, conn, row, fire_at, state)
        else:
            if state.active and row.overlap == "cancel_previous" and state.last_run_id:
                cancels.append((state.last_run_id, row.name))
            publishes += _start(runtime, conn, task, row, fire_at, state)
    now = dt.datetime.fromtimestamp(row.now, UTC)
    next_slot = row.next_slot
    if fired_last is not None or (row.next_slot is not None and row.next_slot <= row.now):
        # "all" may leave firing times of its window for the next poll: start after the last one.
        after = fired_last if fired_last is not None and row.catchup == "all" else now
        next_slot = timing.next_after(after).timestamp()
    schedules.advance_schedule(
        conn,
        row.name,
        next_slot=next_slot,
        last_slot=state.last_slot,
        last_run_id=state.last_run_id,
        buffered_slot=state.buffered,
        missed=state.missed,
        skipped=state.skipped,
    )
    return publishes


def _skip(
    schedules: SchedulesArea,
    conn: Connection,
    row: ScheduleRow,
    fire_at: dt.datetime,
    state: _Firing,
) -> None:
    if schedules.record_firing(conn, row.name, fire_at.timestamp(), "skipped", None):
        state.skipped += 1
        logger.info(
            "schedule %r skipped its firing time %s: run %s is still active (overlap=%r)",
            row.name,
            firing_text(fire_at),
            state.last_run_id,
            row.overlap,
        )


def _start(
    runtime: Runtime,
    conn: Connection,
    task: WorkflowTask,
    row: ScheduleRow,
    fire_at: dt.datetime,
    state: _Firing,
    outcome: str = "started",
    run_id: str | None = None,
) -> list[Publish]:
    run_id = run_id or run_id_of(row.name, fire_at)
    if not SCHEDULES.of(runtime.store).record_firing(
        conn, row.name, fire_at.timestamp(), outcome, run_id
    ):
        return []  # fired before (a backfill over it, or a sweeper that got there first)
    publish = task.start_in(conn, run_id, *_arguments(runtime, row, fire_at))
    state.active, state.last_slot, state.last_run_id = True, fire_at.timestamp(), run_id
    return [] if publish is None else [publish]


def _arguments(
    runtime: Runtime, row: ScheduleRow, fire_at: dt.datetime
) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    args, kwargs = serialization.loads(row.args)
    if row.workflow in runtime.scheduled_for_workflows:
        # ISO 8601 with the zone's name after it (RFC 9557), so the body gets the zone.
        local = fire_at.astimezone(zone(row.tz))
        kwargs = {**kwargs, FIRING_ARGUMENT: f"{local.isoformat()}[{row.tz}]"}
    return tuple(args), kwargs, dict(serialization.loads(row.options))


def trigger(runtime: Runtime, name: str) -> str:
    """Start the schedule's run now, with an id of its own (overlap does not apply);
    returns the run's id."""
    now = dt.datetime.now(UTC)
    return _by_hand(runtime, name, [now], "triggered", unique=True)[0]


def backfill(runtime: Runtime, name: str, start: dt.datetime, end: dt.datetime) -> list[str]:
    """Start the schedule's firing times in ``[start, end]`` that never fired, each once (one
    fired, skipped or backfilled before is left); returns the runs started."""
    with SCHEDULES.of(runtime.store).locked_schedule(name) as (_, row):
        if row is None:
            raise InvalidArgument(f"no schedule named {name!r}")
    if end < start:
        raise InvalidArgument(f"backfill of schedule {name!r}: --to is before --from")
    fire_times = timing_of(row).between(start - _TICK, end, 10_000)
    return _by_hand(runtime, name, fire_times, "backfilled", unique=False)


def _by_hand(
    runtime: Runtime, name: str, fire_times: list[dt.datetime], outcome: str, unique: bool
) -> list[str]:
    """Runs an operator starts: outside the series, so the schedule's own state (its next
    firing time, its last run for overlap) stays as it was."""
    publishes: list[Publish] = []
    started: list[str] = []
    with SCHEDULES.of(runtime.store).locked_schedule(name) as (conn, row):
        if row is None:
            raise InvalidArgument(f"no schedule named {name!r}")
        task = _task(runtime, row.workflow)
        if task is None:
            raise InvalidArgument(
                f"schedule {name!r}: workflow {row.workflow} is not declared in this app"
            )
        state = _Firing(row, False, None, None, None)
        for fire_at in fire_times:
            run_id = f"schedule:{name}:manual:{time_ordered_id()}" if unique else None
            before = state.last_run_id
            publishes += _start(runtime, conn, task, row, fire_at, state, outcome, run_id)
            if state.last_run_id != before and state.last_run_id is not None:
                started.append(state.last_run_id)
    for publish in publishes:
        publish()
    return started


def declare(runtime: Runtime, workflow: Any, **options: Any) -> ScheduleSpec:
    """Declare a schedule of ``workflow`` (a workflow task, or its name) in ``runtime``:
    checked now, upserted by every worker as it starts, fired by its sweeper."""
    name = getattr(workflow, "name", workflow)
    definition = runtime.workflows.get(name) if isinstance(name, str) else None
    if definition is None:
        raise InvalidArgument(
            f"schedule: {workflow!r} is not a workflow of this app; declare it with "
            "@durable.workflow first (below @durable.schedule)"
        )
    spec = register(runtime.schedules, build_spec(name, definition.signature, **options))
    if spec.takes_firing:
        runtime.scheduled_for_workflows.add(name)
    return spec


class SchedulePass:
    """The sweeper's schedule pass (every Durable has one, so that a deploy which drops
    its last schedule still disables it): the code's schedules upserted at the first poll
    of the process (a worker's start), then the due firing times fired every poll."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.synced = False

    def __call__(self) -> int:
        if not self.synced:
            sync(self.runtime)
            self.synced = True
        if not self.runtime.schedules:
            return 0  # nothing this code declares can be due: no statement per poll
        return fire_due(self.runtime)
