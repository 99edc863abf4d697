"""``celery -A app durable schedules``: each schedule with its next firing time, its last run and
its status; ``pause``, ``resume``, ``trigger`` and ``backfill``. Every command takes
``--json``. The lines and JSON are the dashboard's too.

Example::

    durable_group.add_command(schedules_command(find_durable))
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from celery_durable.errors import InvalidArgument
from celery_durable.ops.cli_errors import database_error
from celery_durable.ops.console import span, table
from celery_durable.ops.wing_parts import MetricsGauge
from celery_durable.schedules.declared import timing_of
from celery_durable.schedules.firing_times import UTC
from celery_durable.schedules.operations import ScheduleOperations
from celery_durable.schedules.store import ScheduleRow

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime


def status_of(row: ScheduleRow) -> str:
    """disabled (gone from the code), paused (by an operator), skipping (its last firing time
    was skipped: its run is still active), or active."""
    if row.disabled_at is not None:
        return "disabled"
    if row.paused:
        return "paused"
    if row.last_status in ("PENDING", "RUNNING", "WAITING") and row.skipped:
        return "skipping"
    return "active"


def _when(moment: float | None) -> str | None:
    if moment is None:
        return None
    return dt.datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def schedule_json(row: ScheduleRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "workflow": row.workflow,
        "timing": timing_of(row).describe(),
        "cron": row.cron,
        "every_seconds": row.every,
        "tz": row.tz,
        "overlap": row.overlap,
        "catchup": row.catchup,
        "status": status_of(row),
        "paused": row.paused,
        "disabled": row.disabled_at is not None,
        "next_slot": _when(row.next_slot),
        "last_slot": _when(row.last_slot),
        "last_run_id": row.last_run_id,
        "last_run_status": row.last_status,
        "last_lag_seconds": row.last_lag,
        "buffered_slot": _when(row.buffered_slot),
        "skipped": row.skipped,
        "missed": row.missed,
    }


def schedule_lags(runtime: Runtime) -> list[tuple[tuple[str, ...], float]]:
    """How late each schedule's last started firing time fired (none until one has)."""
    rows = ScheduleOperations(runtime).list_schedules()
    return [((row.name,), row.last_lag) for row in rows if row.last_lag is not None]


# The metrics endpoint's ``celery_durable_schedule_lag_seconds{schedule}``, registered by
# wiring.py.
SCHEDULE_LAG = MetricsGauge(
    "schedule_lag_seconds",
    "How late the schedule's last started firing time fired",
    ("schedule",),
    schedule_lags,
)


def schedule_lines(rows: Sequence[ScheduleRow]) -> list[str]:
    if not rows:
        return ["no schedule is declared"]
    lines = []
    for row in rows:
        last = "-" if row.last_run_id is None else f"{row.last_run_id} {row.last_status or '?'}"
        lines.append(
            [
                row.name,
                timing_of(row).describe(),
                status_of(row),
                _when(row.next_slot) or "-",
                last,
                span(row.last_lag),
                str(row.skipped),
                str(row.missed),
            ]
        )
    headers = ["NAME", "WHEN", "STATUS", "NEXT SLOT", "LAST RUN", "LAG", "SKIPPED", "MISSED"]
    return table(headers, lines, right=6)


def _moment(text: str, argument: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=argument) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def schedules_command(find: Callable[[click.Context], ScheduleOperations]) -> click.Group:
    """The command group, on the operations (the Durable) ``find`` returns for the context."""
    as_json_option = click.option("--json", "as_json", is_flag=True, help="JSON output.")

    @click.group(
        name="schedules",
        invoke_without_command=True,
        help="Each schedule: its next firing time, last run and status. Subcommands act on one.",
    )
    @as_json_option
    @click.pass_context
    def schedules(ctx: click.Context, as_json: bool) -> None:
        if ctx.invoked_subcommand is not None:
            return
        operations = find(ctx)
        try:
            rows = operations.list_schedules()
        except Exception as exc:
            error = database_error(exc, operations.runtime.store, "cannot read the schedules")
            raise error or click.ClickException(f"cannot read the schedules: {exc}") from None
        if as_json:
            for row in rows:
                click.echo(json.dumps(schedule_json(row)))
            return
        for line in schedule_lines(rows):
            click.echo(line)

    def _act(
        ctx: click.Context, as_json: bool, name: str, act: Callable[[ScheduleOperations], Any]
    ) -> None:
        instance = find(ctx)
        try:
            done = act(instance)
        except InvalidArgument as exc:
            raise click.ClickException(str(exc)) from None
        if as_json:
            click.echo(json.dumps({"schedule": name, **done}))
        else:
            click.echo(" ".join(f"{k}={v}" for k, v in {"schedule": name, **done}.items()))

    def switch(paused: bool) -> Callable[..., None]:
        def command(ctx: click.Context, name: str, as_json: bool) -> None:
            def act(operations: ScheduleOperations) -> dict[str, Any]:
                if paused:
                    operations.pause_schedule(name)
                else:
                    operations.resume_schedule(name)
                return {"paused": paused}

            _act(ctx, as_json, name, act)

        return command

    for verb, paused in (("pause", True), ("resume", False)):
        helped = (
            f"{verb.capitalize()} a schedule: it {'no longer fires' if paused else 'fires again'}."
        )
        schedules.command(name=verb, help=helped)(
            click.argument("name")(as_json_option(click.pass_context(switch(paused))))
        )

    @schedules.command(name="trigger", help="Start a run of the schedule now (its own id).")
    @click.argument("name")
    @as_json_option
    @click.pass_context
    def trigger(ctx: click.Context, name: str, as_json: bool) -> None:
        _act(ctx, as_json, name, lambda d: {"run_id": d.trigger_schedule(name)})

    @schedules.command(name="backfill", help="Start the firing times in a range that never fired.")
    @click.argument("name")
    @click.option("--from", "start", required=True, help="ISO 8601 (UTC if no offset).")
    @click.option("--to", "end", required=True, help="ISO 8601 (UTC if no offset).")
    @as_json_option
    @click.pass_context
    def backfill(ctx: click.Context, name: str, start: str, end: str, as_json: bool) -> None:
        first, last = _moment(start, "--from"), _moment(end, "--to")
        _act(
            ctx,
            as_json,
            name,
            lambda d: {"run_ids": d.backfill_schedule(name, first, last)},
        )

    return schedules
