"""``celery -A app durable ...``: a click group in Celery's ``celery.commands`` entry point.

Example::

    celery -A shop durable migrate          # create or upgrade the tables
    celery -A shop durable migrate --sql    # print the DDL instead
    celery -A shop durable sweep            # one sweep now (workers sweep on their own)
    celery -A shop durable show order-42    # a run's status, attempts and steps
    celery -A shop durable signal order-42 approval '{"by": "alice"}'
    celery -A shop durable cancel order-42 --reason "customer left"
    celery -A shop durable metrics --port 9808   # Prometheus endpoint (the metrics extra)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from . import validate
from .apps import durables_of
from .errors import DatabaseUnavailable, DurableError, WorkflowAlreadyCompleted, WorkflowNotFound
from .extension import Durable
from .store import FINISHED_STATUSES
from .store.outage import is_unreachable, retry_while_unreachable, unavailable


def _durables(ctx: click.Context) -> list[Durable]:
    app = ctx.obj.app
    found = durables_of(app)
    if not found:
        raise click.UsageError(
            f"no celery_durable.Durable is bound to the app {app.main!r}; "
            "create one with Durable(app, ...) in the module given to -A"
        )
    return found


@click.group(name="durable", help="celery_durable: migrations and maintenance.")
def durable() -> None:
    pass


@durable.command(help="Create or upgrade celery_durable's tables.")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@click.option("--revision", default="head", show_default=True)
@click.pass_context
def migrate(ctx: click.Context, sql: bool, revision: str) -> None:
    for instance in _durables(ctx):
        output: Any = instance.migrate(revision=revision, sql=sql)
        if sql:
            click.echo(output)
        else:
            click.echo(f"celery_durable tables ({instance.config.table_prefix}*) at {revision}")


@durable.command(help="Publish again every run that is due (what workers do on their own).")
@click.pass_context
def sweep(ctx: click.Context) -> None:
    for instance in _durables(ctx):
        click.echo(f"published {instance.sweep_once()} run(s)")


def _only_durable(ctx: click.Context) -> Durable:
    found = _durables(ctx)
    if len(found) > 1:
        raise click.UsageError("several Durable instances are bound to this app")
    return found[0]


def _check_id(workflow_id: str) -> None:
    try:
        validate.check_workflow_id(workflow_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="WORKFLOW_ID") from None


@contextmanager
def _one_line_errors(instance: Durable, action: str, workflow_id: str) -> Iterator[None]:
    """What a user can act on (unknown or finished run, bad input, database down) becomes
    one line and a non-zero exit (click.ClickException) instead of a traceback."""
    where = f"cannot {action} workflow run {workflow_id!r}"
    try:
        yield
    except WorkflowNotFound:
        namespace = instance.config.namespace
        raise click.ClickException(f"{where}: no such run in namespace {namespace!r}") from None
    except WorkflowAlreadyCompleted as exc:
        raise click.ClickException(f"{where}: its status is {exc.status} (finished)") from None
    except DurableError as exc:
        raise click.ClickException(f"{where}: {exc}") from None
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        raise click.ClickException(str(unavailable(exc, instance.store.url, where))) from None


@durable.command(help="Show a run: status, attempts, steps.")
@click.argument("workflow_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to keep retrying while the database is unreachable (a restart).",
)
@click.pass_context
def show(ctx: click.Context, workflow_id: str, timeout: float) -> None:
    instance = _only_durable(ctx)
    _check_id(workflow_id)
    store = instance.store

    def read() -> tuple[Any, dict[int, Any]]:
        run = store.get_run(workflow_id)
        return run, {} if run is None else store.load_steps(workflow_id)

    try:
        run, steps = retry_while_unreachable(
            read, timeout, store.url, f"cannot show workflow run {workflow_id!r}"
        )
    except DatabaseUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    if run is None:
        raise click.ClickException(f"no workflow run {workflow_id!r}")
    # A suspended run gives its attempt back, so a run that ran shows at least attempt 1.
    attempt = max(run.attempts, 1 if run.started_at is not None else 0)
    click.echo(f"{run.id}  {run.name}  {run.status}  attempt {attempt}/{run.max_attempts}")
    if run.wait_signal:
        click.echo(f"waiting for signal {run.wait_signal!r}")
    finished = run.status in FINISHED_STATUSES
    for step in steps.values():
        status = step.status
        if status == "waiting" and finished:
            status = f"not reached (run {run.status.lower()} while waiting)"
        line = f"  step {step.idx}: {step.name} {status}"
        definition = instance.steps.get(step.name)
        if definition is not None and definition.max_attempts > 1:
            # Step retries happen inside each workflow attempt: the two multiply.
            calls = definition.max_attempts * run.max_attempts
            line += (
                f"  (up to {definition.max_attempts} tries per attempt x "
                f"{run.max_attempts} attempts = {calls} calls)"
            )
        click.echo(line)
    if run.error:
        click.echo(f"error: {json.loads(run.error).get('message')}")


@durable.command(name="signal", help="Send a signal (payload as JSON) to a run.")
@click.argument("workflow_id")
@click.argument("name")
@click.argument("payload", default="null")
@click.option("--idempotency-key", default=None)
@click.pass_context
def signal_command(
    ctx: click.Context, workflow_id: str, name: str, payload: str, idempotency_key: str | None
) -> None:
    instance = _only_durable(ctx)
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD") from None
    _check_id(workflow_id)
    with _one_line_errors(instance, f"signal {name!r} to", workflow_id):
        stored = instance.get_handle(workflow_id).signal(name, value, idempotency_key)
    click.echo("stored" if stored else "duplicate idempotency key: nothing stored")


@durable.command(help="Cancel a run.")
@click.argument("workflow_id")
@click.option("--reason", default=None)
@click.pass_context
def cancel(ctx: click.Context, workflow_id: str, reason: str | None) -> None:
    instance = _only_durable(ctx)
    _check_id(workflow_id)
    with _one_line_errors(instance, "cancel", workflow_id):
        status = instance.get_handle(workflow_id).cancel(reason)
    click.echo(f"{workflow_id}: {status}")


@durable.command(help="Serve Prometheus metrics, read from the store (the metrics extra).")
@click.option("--port", type=click.IntRange(0, 65535), default=9808, show_default=True)
@click.option("--address", default="0.0.0.0", show_default=True)
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
        from .metrics import serve_forever
    except ImportError as exc:
        raise click.ClickException(
            f"durable metrics needs prometheus_client ({exc}): "
            'pip install "celery-durable[metrics]"'
        ) from None
    click.echo(f"serving celery_durable metrics on http://{address}:{port}/metrics")
    serve_forever(instances, port, address, interval)
