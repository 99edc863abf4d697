"""Schedules declared in code: a workflow started once per firing time of a cron or an interval,
by whichever worker's sweeper reaches the firing time first. No beat process, no lock service.

Each worker upserts the schedules its code declares when it starts (``sync``); a schedule
gone from the code is disabled, its row and runs kept. The firing times are fired by
``celery_durable.schedules.firing``; a run's body gets its firing time as a datetime through the
delivery hook ``slot_argument`` (wiring.py registers it).

Example::

    @durable.schedule(cron="0 2 * * *", tz="Europe/Paris", overlap="skip")
    @durable.workflow
    def nightly_invoices(scheduled_for: datetime) -> int: ...

    durable.schedule(report, every=timedelta(minutes=15), args=("eu",), name="report-eu")
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import inspect
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_durable.core import serialization, validate
from celery_durable.errors import InvalidArgument
from celery_durable.schedules.cron import Cron
from celery_durable.schedules.firing_times import Schedule, zone
from celery_durable.schedules.interval import Interval
from celery_durable.schedules.store import SCHEDULES, DeclaredSchedule, ScheduleRow

if TYPE_CHECKING:
    from celery_durable.engine.hooks import Delivery
    from celery_durable.engine.runtime import Runtime

logger = logging.getLogger("celery_durable.schedules")

OVERLAPS = ("skip", "buffer_one", "allow", "cancel_previous")
CATCHUPS = ("latest", "all", "none")
DEFAULT_CATCHUP_WINDOW = 3600.0  # "all" fires the missed firing times of the last hour at most
FIRING_ARGUMENT = "scheduled_for"
# The options of a start a schedule may carry (the others name one run, not a series).
START_OPTIONS = ("queue", "priority", "timeout", "routing_key", "exchange", "headers")


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as the code declares it."""

    name: str
    workflow: str
    timing: Schedule
    cron: str | None
    every: float | None
    tz: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    overlap: str
    catchup: str
    catchup_window: float
    takes_firing: bool  # the workflow has a ``scheduled_for`` parameter

    def declared(self, now: dt.datetime) -> DeclaredSchedule:
        args = serialization.dumps([list(self.args), self.kwargs])
        options = serialization.dumps(self.options)
        digest = hashlib.sha256(
            serialization.dumps(
                [self.workflow, self.cron, self.every, self.tz, args, options]
                + [self.overlap, self.catchup, self.catchup_window]
            ).encode()
        ).hexdigest()[:32]
        return DeclaredSchedule(
            self.name,
            self.workflow,
            self.cron,
            self.every,
            self.tz,
            args,
            options,
            self.overlap,
            self.catchup,
            self.catchup_window,
            digest,
            self.timing.next_after(now).timestamp(),
        )


def _choice(value: Any, allowed: tuple[str, ...], argument: str, owner: str) -> str:
    if value not in allowed:
        raise InvalidArgument(
            f"{owner}: {argument} must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )
    return str(value)


def build_spec(
    workflow: str,
    signature: inspect.Signature | None,
    *,
    name: str | None = None,
    cron: str | None = None,
    every: Any = None,
    tz: str | None = None,
    args: Any = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    overlap: str = "skip",
    catchup: str = "latest",
    catchup_window: Any = DEFAULT_CATCHUP_WINDOW,
) -> ScheduleSpec:
    """Check a declaration: InvalidArgument naming what is wrong, before anything is kept."""
    name = workflow if name is None else name
    owner = f"schedule {name!r}"
    validate.check_text(name, "schedule(name)", max_chars=200, allow_empty=False)
    if (cron is None) == (every is None):
        raise InvalidArgument(f"{owner}: give cron= or every=, one of them")
    zoned = zone(tz, f"{owner}: tz")
    timing: Schedule = (
        Cron.parse(cron, f"{owner}: cron", tz=zoned)
        if cron is not None
        else Interval.parse(every, f"{owner}: every")
    )
    seconds = None if not isinstance(timing, Interval) else timing.seconds
    overlap = _choice(overlap, OVERLAPS, "overlap", owner)
    catchup = _choice(catchup, CATCHUPS, "catchup", owner)
    window = validate.parse_duration(catchup_window, f"{owner}: catchup_window")
    if not isinstance(args, (list, tuple)):
        raise InvalidArgument(f"{owner}: args must be a tuple or a list, got {args!r}")
    start_options = dict(options or {})
    unknown = sorted(set(start_options) - set(START_OPTIONS))
    if unknown:
        raise InvalidArgument(
            f"{owner}: options {unknown} can't be given to every run of a schedule "
            f"(it takes {', '.join(START_OPTIONS)})"
        )
    takes_firing = signature is not None and (
        FIRING_ARGUMENT in signature.parameters
        or any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    )
    given = dict(kwargs or {})
    if signature is not None:
        fire_at = {FIRING_ARGUMENT: dt.datetime.now(dt.timezone.utc)} if takes_firing else {}
        try:
            signature.bind(*args, **given, **fire_at)
        except TypeError as exc:
            raise InvalidArgument(
                f"{owner}: workflow {workflow} can't take these arguments: {exc}"
            ) from None
    spec = ScheduleSpec(
        name=name,
        workflow=workflow,
        timing=timing,
        cron=cron,
        every=seconds,
        tz=str(zoned.key),
        args=tuple(args),
        kwargs=given,
        options=start_options,
        overlap=overlap,
        catchup=catchup,
        catchup_window=window,
        takes_firing=takes_firing,
    )
    try:
        spec.declared(dt.datetime.now(dt.timezone.utc))
    except ValueError as exc:
        raise InvalidArgument(
            f"{owner}: its args, kwargs and options must be JSON: {exc}"
        ) from None
    return spec


def register(schedules: dict[str, ScheduleSpec], spec: ScheduleSpec) -> ScheduleSpec:
    """Keep ``spec`` (the Runtime's registry); a name declared twice must say the same."""
    known = schedules.get(spec.name)
    now = dt.datetime.now(dt.timezone.utc)
    if known is not None and known.declared(now).definition != spec.declared(now).definition:
        raise InvalidArgument(
            f"schedule {spec.name!r}: the name is already used by another schedule "
            f"(of workflow {known.workflow}); give this one name=..."
        )
    return schedules.setdefault(spec.name, spec)


def timing_of(row: ScheduleRow) -> Schedule:
    """The firing times of a stored schedule (its definition as the store holds it)."""
    if row.cron is not None:
        return _cron(row.cron, row.tz)
    return Interval(float(row.every or 0))


_crons: dict[tuple[str, str], Cron] = {}


def _cron(expression: str, tz: str) -> Cron:
    found = _crons.get((expression, tz))
    if found is None:
        found = _crons[(expression, tz)] = Cron.parse(expression, tz=tz)
    return found


def sync(runtime: Runtime) -> list[str]:
    """Upsert the code's schedules (a worker does it as it starts): new or changed ones
    from their next firing time; the namespace's others are disabled. Returns those disabled."""
    now = dt.datetime.now(dt.timezone.utc)
    declared = [spec.declared(now) for spec in runtime.schedules.values()]
    disabled = SCHEDULES.of(runtime.store).declare_schedules(declared, sorted(runtime.workflows))
    for name in disabled:
        logger.warning("schedule %r is no longer declared in code: disabled", name)
    return disabled


def from_beat(
    beat_schedule: Mapping[str, Mapping[str, Any]],
    workflows: Mapping[str, Any],
    tz: str | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Celery ``beat_schedule`` entries as schedule declarations, for the entries that
    name a workflow of ``workflows``; and, for each entry it can't express, why. A
    ``crontab`` is read in ``tz``, the app's ``timezone``, as beat reads it."""
    declared: list[dict[str, Any]] = []
    refused: list[str] = []
    for entry_name, entry in beat_schedule.items():
        task = entry.get("task")
        if task not in workflows:
            continue
        timing, problem = _beat_timing(entry.get("schedule"), tz)
        unknown = sorted(set(entry) - {"task", "schedule", "args", "kwargs", "options"})
        options = dict(entry.get("options") or {})
        bad_options = sorted(set(options) - set(START_OPTIONS))
        if problem is None and unknown:
            problem = f"has {unknown}, which a schedule doesn't take"
        if problem is None and bad_options:
            problem = f"its options {bad_options} can't be given to every run"
        if problem is not None:
            refused.append(f"beat entry {entry_name!r} (task {task}): {problem}")
            continue
        declared.append(
            {
                "workflow": task,
                "name": entry_name,
                "args": tuple(entry.get("args") or ()),
                "kwargs": dict(entry.get("kwargs") or {}),
                "options": options,
                **timing,
            }
        )
    return declared, refused


def _beat_timing(schedule: Any, tz: str | None) -> tuple[dict[str, Any], str | None]:
    from celery.schedules import crontab  # noqa: PLC0415 - only for beat's entries
    from celery.schedules import schedule as interval  # noqa: PLC0415

    if isinstance(schedule, (int, float, dt.timedelta)):
        return {"every": schedule}, None
    if isinstance(schedule, crontab):
        fields = [schedule._orig_minute, schedule._orig_hour, schedule._orig_day_of_month]
        fields += [schedule._orig_month_of_year, schedule._orig_day_of_week]
        return {"cron": " ".join(_cron_field(f) for f in fields), "tz": tz}, None
    if isinstance(schedule, interval):
        return {"every": schedule.run_every}, None
    return {}, f"its schedule {schedule!r} is neither a crontab nor an interval"


def _cron_field(value: Any) -> str:
    """A crontab field as beat keeps it (text, a number or a set of numbers) as cron text."""
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(str(v) for v in sorted(value))
    return str(value)


def given_slot(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A schedule's run keeps its firing time as ISO 8601 text (arguments are JSON); its body
    gets it as the timezone-aware datetime it is."""
    fire_at = kwargs.get(FIRING_ARGUMENT)
    if not isinstance(fire_at, str) or not fire_at.endswith("]") or "[" not in fire_at:
        return kwargs
    moment, _, tz = fire_at[:-1].partition("[")
    try:
        given = dt.datetime.fromisoformat(moment).astimezone(ZoneInfo(tz))
    except (ValueError, ZoneInfoNotFoundError):
        return kwargs  # not a firing time a schedule wrote: the body gets what it was given
    return {**kwargs, FIRING_ARGUMENT: given}


def slot_argument(delivery: Delivery) -> None:
    """The delivery hook (before the body) that gives the workflows with a
    ``scheduled_for`` parameter (the runtime's ``scheduled_for_workflows``) their firing time."""
    if delivery.definition.name in delivery.runtime.scheduled_for_workflows:
        delivery.kwargs = given_slot(delivery.kwargs)
