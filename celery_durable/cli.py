"""``celery -A app durable ...``: a click group in Celery's ``celery.commands`` entry point.

Example::

    celery -A shop durable migrate          # create or upgrade the tables
    celery -A shop durable migrate --sql    # print the DDL instead
    celery -A shop durable sweep            # one sweep now (workers sweep on their own)
    celery -A shop durable show order-42    # a run's status, attempts and steps
    celery -A shop durable signal order-42 approval '{"by": "alice"}'
    celery -A shop durable tail chat-42 tokens   # a run's stream, as it is written
    celery -A shop durable cancel order-42 --reason "customer left"
    celery -A shop durable list --status failed --workflow shop.checkout --since 2h
    celery -A shop durable stats
    celery -A shop durable resume order-42 order-43
    celery -A shop durable resume --status failed --workflow shop.checkout --since 2h --dry-run
    celery -A shop durable fork order-42 --from-step 2 --workflow-id order-42-retry
    celery -A shop durable gc --older-than 30d --status succeeded,cancelled --dry-run
    celery -A shop durable dashboard --port 5580 --basic-auth ops:s3cret
    celery -A shop durable metrics --port 9808   # Prometheus endpoint (the metrics extra)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from celery_durable.core import validate
from celery_durable.core.redact import redactor_of
from celery_durable.durable import Durable, durables_of
from celery_durable.engine.queues import consumed_queues
from celery_durable.errors import (
    DatabaseUnavailable,
    DurableError,
    WorkflowAlreadyCompleted,
    WorkflowAlreadyExists,
    WorkflowNotFound,
    WorkflowNotResumable,
)
from celery_durable.limiters.report import limiters_command
from celery_durable.ops import console, run_details
from celery_durable.ops.cli_errors import DurableGroup, database_error
from celery_durable.ops.dashboard.command import dashboard_command
from celery_durable.ops.wing_parts import WING_PARTS
from celery_durable.runs.stored_runs import RunDetails, cursor_of
from celery_durable.schedules.report import schedules_command
from celery_durable.store import ItemRow
from celery_durable.store.db.outage import retry_while_unreachable
from celery_durable.streams.report import tail_command


def _durables(ctx: click.Context) -> list[Durable]:
    app = ctx.obj.app
    found = durables_of(app)
    if not found:
        raise click.UsageError(
            f"no celery_durable.Durable is bound to the app {app.main!r}; "
            "create one with Durable(app, ...) in the module given to -A"
        )
    return found


@click.group(cls=DurableGroup, name="durable", help="celery_durable: migrations and maintenance.")
def durable() -> None:
    pass


@durable.command(help="Create or upgrade celery_durable's tables.")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@click.option("--revision", default="head", show_default=True)
@click.pass_context
def migrate(ctx: click.Context, sql: bool, revision: str) -> None:
    for instance in _durables(ctx):
        click.echo(str(instance.migrate(revision=revision, sql=sql)))


@durable.command(help="Publish again every run that is due (what workers do on their own).")
@click.pass_context
def sweep(ctx: click.Context) -> None:
    for instance in _durables(ctx):
        click.echo(f"published {instance.runtime.sweeper.sweep_once()} run(s)")


def _only_durable(ctx: click.Context) -> Durable:
    found = _durables(ctx)
    if len(found) > 1:
        raise click.UsageError("several Durable instances are bound to this app")
    return found[0]


def _check_id(run_id: str) -> None:
    try:
        validate.check_run_id(run_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_ID") from None


@contextmanager
def _one_line_errors(instance: Durable, action: str, run_id: str) -> Iterator[None]:
    """What a user can act on (unknown or finished run, bad input, database down) becomes
    one line and a non-zero exit (click.ClickException) instead of a traceback."""
    where = f"cannot {action} workflow run {run_id!r}"
    try:
        yield
    except WorkflowNotFound:
        namespace = instance.config.namespace
        raise click.ClickException(f"{where}: no such run in namespace {namespace!r}") from None
    except WorkflowAlreadyCompleted as exc:
        raise click.ClickException(f"{where}: its status is {exc.status} (finished)") from None
    except WorkflowNotResumable as exc:
        raise click.ClickException(
            f"{where}: its status is {exc.status} (only FAILED or CANCELLED runs resume)"
        ) from None
    except DurableError as exc:
        raise click.ClickException(f"{where}: {exc}") from None
    except Exception as exc:
        if (error := database_error(exc, instance.runtime.store, where)) is None:
            raise
        raise error from None


@durable.command(
    help="Show a run: status, attempts, steps, waits, signals, state keys, fan-out items, children."
)
@click.argument("run_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to keep retrying while the database is unreachable (a restart).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for scripts.")
@click.option(
    "--max-items",
    default=100,
    show_default=True,
    help="Items listed per fan-out step (0: all); the counts cover every item.",
)
@run_details.steps_page_options
@click.pass_context
def show(
    ctx: click.Context,
    run_id: str,
    timeout: float,
    as_json: bool,
    max_items: int,
    steps_from: int,
    steps_limit: int,
) -> None:
    instance = _only_durable(ctx)
    _check_id(run_id)
    store = instance.runtime.store

    def read() -> tuple[RunDetails | None, list[ItemRow], dict[str, Any]]:
        details = instance.describe_run(run_id, steps_from, steps_limit)
        if details is None:
            return None, [], {}
        parts = WING_PARTS.parts_of_run(instance, details.run)  # streams, say
        return details, instance.list_items(run_id), parts

    try:
        details, rows, parts = retry_while_unreachable(
            read, timeout, store.url, f"cannot show workflow run {run_id!r}"
        )
    except DatabaseUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    if details is None:
        raise click.ClickException(f"no workflow run {run_id!r}")
    unstarted = run_details.unstarted_queues(rows)
    # Only when items wait unstarted: ask the workers (a broadcast, about a second).
    consumed = consumed_queues(instance.app) if unstarted else None
    idle = unstarted - consumed if consumed is not None else set()
    unannounced = run_details.unannounced_line(instance.runtime, details.run)
    if as_json:
        shown = run_details.details_json(details)
        mask = redactor_of(instance.app.conf.get("durable_redact"))
        for step in shown["steps"]:
            step["input"], step["output"] = mask(step["input"]), mask(step["output"])
        shown["items"] = [run_details.item_json(row) for row in rows]
        shown.update(unconsumed_queues=sorted(idle), unannounced=unannounced)
        shown.update(parts)
        click.echo(json.dumps(shown))
        return
    run = details.run
    click.echo(f"{run.id}  {run.name}  {run.status}  attempt {console.attempts_of(run)}")
    click.echo(run_details.times_line(run))
    _echo_if(console.cancel_line(run) or run_details.ended_cancel_line(run))
    _echo_if(run_details.fork_line(run))
    _echo_if(run_details.wait_line(run))
    _echo_if(unannounced)
    if run.parent_id:
        click.echo(f"child of {run.parent_id} (its step {run.parent_idx})")
    if run.wait_items:
        click.echo("waiting for items (parallel steps, remote steps or children)")
    items: dict[int, list[ItemRow]] = {}
    for row in rows:
        items.setdefault(row.idx, []).append(row)
    for step in details.steps:
        status = run_details.step_status(run, step)
        if status == run_details.NOT_REACHED:
            status += f" (run {run.status.lower()} while waiting)"
        line = f"  step {step.idx}: {step.name} {status}"
        times = run_details.step_times(step)
        if times:
            line += f"  {times}"
        definition = instance.steps.get(step.name)
        tries = definition.options.max_attempts if definition is not None else 1
        if tries > 1:
            # Step retries happen inside each workflow attempt: the two multiply.
            calls = tries * run.max_attempts
            line += (
                f"  (up to {tries} tries per attempt x {run.max_attempts} attempts = {calls} calls)"
            )
        click.echo(line)
        if step.error and step.status != "ok":
            click.echo(f"    {console.error_summary(step.error)}")
        for item_line in run_details.item_lines(items.get(step.idx, []), max_items, idle):
            click.echo(item_line)
    _echo_if(run_details.page_line(details))
    _echo_if(run_details.signals_line(details))
    _echo_if(run_details.state_line(details))
    for part in WING_PARTS.run_parts:
        for line in part.lines(parts[part.name]):
            click.echo(line)
    _echo_if("\n".join(run_details.action_lines(details)) or None)
    if run.error:
        click.echo(f"error: {console.error_summary(run.error, width=500)}")


def _echo_if(line: str | None) -> None:
    if line is not None:
        click.echo(line)


@contextmanager
def _operation_errors(instance: Durable, what: str) -> Iterator[None]:
    """Bad input, a refused operation or a database that is down: one line, exit 1."""
    try:
        yield
    except DurableError as exc:
        raise click.ClickException(f"cannot {what}: {exc}") from None
    except Exception as exc:
        if (error := database_error(exc, instance.runtime.store, f"cannot {what}")) is None:
            raise
        raise error from None


_STATUS_HELP = "Comma-separated: pending, running, waiting, succeeded, failed, cancelled."
_WHEN_HELP = "A duration ago (90m, 2h, 30d) or an ISO 8601 time (2026-12-01T10:00)."


@durable.command(name="list", help="List runs, newest first, a page at a time.")
@click.option("--status", default=None, help=_STATUS_HELP)
@click.option("--workflow", default=None, help="The workflow's (task) name.")
@click.option("--since", default=None, help=f"Created at or after this. {_WHEN_HELP}")
@click.option("--until", default=None, help=f"Created before this. {_WHEN_HELP}")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--after", default=None, help="The cursor the previous page printed.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run and line.")
@click.pass_context
def list_command(
    ctx: click.Context,
    status: str | None,
    workflow: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    instance = _only_durable(ctx)
    with _operation_errors(instance, "list runs"):
        page = instance.list_runs(status, workflow, since, until, limit, after)
    if as_json:
        # Each line carries the cursor that continues after it: a script pages on with
        # the last line's, and stops at an empty page.
        for run in page.runs:
            click.echo(json.dumps(console.run_json(run, cursor_of(run))))
        return
    if not page.runs:
        click.echo("no runs match")
        return
    for line in console.run_table(page.runs):
        click.echo(line)
    if page.cursor:
        click.echo(f"next page: --after {page.cursor}")


@durable.command(help="Runs by workflow and status, the oldest pending and waiting runs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    instance = _only_durable(ctx)
    with _operation_errors(instance, "read the stats"):
        counted = instance.stats()
    if as_json:
        click.echo(json.dumps(console.stats_json(counted)))
        return
    for line in console.stats_lines(counted):
        click.echo(line)


@durable.command(help="Resume FAILED or CANCELLED runs from their first unfinished step.")
@click.argument("run_ids", nargs=-1)
@click.option("--workflow", default=None, help="Resume every matching run of this workflow.")
@click.option("--status", default=None, help="With --workflow: failed (default), cancelled.")
@click.option("--since", default=None, help=f"With --workflow: created at or after. {_WHEN_HELP}")
@click.option("--until", default=None, help=f"With --workflow: created before. {_WHEN_HELP}")
@click.option("--dry-run", is_flag=True, help="With --workflow: print what would be resumed.")
@click.option("--timeout", default=None, help="A new deadline from now: 90s, 15m, 2h.")
@click.pass_context
def resume(
    ctx: click.Context,
    run_ids: tuple[str, ...],
    workflow: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    dry_run: bool,
    timeout: str | None,
) -> None:
    instance = _only_durable(ctx)
    bulk = workflow is not None
    if run_ids and (bulk or status or since or until or dry_run):
        raise click.UsageError("give run ids, or --workflow with its filters, not both")
    if not run_ids and not bulk:
        raise click.UsageError("give run ids, or --workflow (and --status, --since) to resume")
    if not bulk:
        refused = 0
        for run_id in run_ids:
            _check_id(run_id)
            try:
                with _one_line_errors(instance, "resume", run_id):
                    resumed = instance.resume_run(run_id, timeout)
            except click.ClickException as exc:
                click.echo(f"Error: {exc.message}", err=True)
                refused += 1
                continue
            again = "" if resumed.dropped_step is None else ", which failed and runs again"
            click.echo(
                f"{run_id}: resumed (was {resumed.status} after attempt "
                f"{resumed.attempts}), continues at step {resumed.from_step}{again}"
            )
        ctx.exit(1 if refused else 0)
    assert workflow is not None
    with _operation_errors(instance, "resume runs"):
        done = instance.resume_runs(workflow, status or "failed", since, until, dry_run)
    verb = "would resume" if dry_run else "resumed"
    for run in done.resumed:
        why = console.detail(run)
        click.echo(f"{verb} {run.id}  {run.status} {console.attempts_of(run)}  {why}".rstrip())
    for run, now in done.skipped:
        click.echo(f"skipped {run.id}: its status is now {now}")
    click.echo(f"{verb} {len(done.resumed)} run(s) of {workflow}")


@durable.command(help="Start a new run that keeps a run's steps before --from-step.")
@click.argument("run_id")
@click.option(
    "--from-step",
    type=click.IntRange(min=0),
    required=True,
    help="The first step to run again (0-based, as show numbers them).",
)
@click.option("--workflow-id", "new_id", default=None, help="The new run's id (default: new).")
@click.option("--timeout", default=None, help="The new run's deadline from now: 90s, 2h.")
@click.pass_context
def fork(
    ctx: click.Context, run_id: str, from_step: int, new_id: str | None, timeout: str | None
) -> None:
    instance = _only_durable(ctx)
    _check_id(run_id)
    with _one_line_errors(instance, "fork", run_id):
        try:
            forked = instance.fork_run(run_id, from_step, new_id, timeout)
        except WorkflowAlreadyExists as exc:
            raise DurableError(f"a run with id {exc.run_id!r} already exists") from None
        steps = instance.runtime.store.load_steps(run_id)
    in_order = [steps[idx] for idx in sorted(steps)]
    for line in console.fork_lines(run_id, from_step, forked, in_order):
        click.echo(line)


@durable.command(help="Delete finished runs (their steps, signals, state) and orphan signals.")
@click.option("--older-than", required=True, help="Finished longer ago than this: 30d, 12h.")
@click.option("--status", default=None, help="Of succeeded, failed, cancelled (default all).")
@click.option("--dry-run", is_flag=True, help="Print the counts only; delete nothing.")
@click.pass_context
def gc(ctx: click.Context, older_than: str, status: str | None, dry_run: bool) -> None:
    instance = _only_durable(ctx)
    with _operation_errors(instance, "collect runs"):
        collected = instance.gc(older_than, status, dry_run)
    click.echo(console.collected_line(collected, dry_run))


@durable.command(name="signal", help="Send a signal (payload as JSON, default null) to a run.")
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
@click.option("--idempotency-key", "key", default=None)
@click.pass_context
def signal_command(
    ctx: click.Context, run_id: str, name: str, payload: str | None, key: str | None
) -> None:
    instance = _only_durable(ctx)
    try:
        value = None if payload is None else json.loads(payload)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD") from None
    _check_id(run_id)
    with _one_line_errors(instance, f"signal {name!r} to", run_id):
        stored = instance.get_handle(run_id).signal(name, value, key)
    # A timeout returns None too, unless the body passed wait_for_signal(default=...).
    sent = " with the payload null (no PAYLOAD given)" if payload is None else ""
    click.echo(f"stored{sent}" if stored else "duplicate idempotency key: nothing stored")


@durable.command(help="Cancel a run.")
@click.argument("run_id")
@click.option("--reason", default=None)
@click.pass_context
def cancel(ctx: click.Context, run_id: str, reason: str | None) -> None:
    instance = _only_durable(ctx)
    _check_id(run_id)
    with _one_line_errors(instance, "cancel", run_id):
        status = instance.get_handle(run_id).cancel(reason)
    pending = "" if status.finished else f", cancel requested: {console.cancel_pending(status)}"
    click.echo(f"{run_id}: {status}{pending}")


@durable.command(help="Serve Prometheus metrics, read from the store (the metrics extra).")
@click.option("--port", type=click.IntRange(0, 65535), default=9808, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True, help="0.0.0.0: every interface")
@click.option(
    "--interval",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Seconds one read of the store serves scrapes for.",
)
@click.pass_context
def metrics(ctx: click.Context, port: int, address: str, interval: float) -> None:
    instances = _durables(ctx)
    try:
        from celery_durable.ops.metrics import serve_forever
    except ImportError as exc:
        raise click.ClickException(
            f"durable metrics needs prometheus_client ({exc}): "
            'pip install "celery-durable[metrics]"'
        ) from None
    click.echo(f"serving celery_durable metrics on http://{address}:{port}/metrics")
    serve_forever(instances, port, address, interval)


durable.add_command(dashboard_command(_only_durable))
durable.add_command(limiters_command(_only_durable))
durable.add_command(schedules_command(_only_durable))
durable.add_command(tail_command(_only_durable))
