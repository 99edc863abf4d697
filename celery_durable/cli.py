"""``celery -A app durable ...``: a click group in Celery's ``celery.commands`` entry point.

Example::

    celery -A shop durable migrate          # create or upgrade the tables
    celery -A shop durable migrate --sql    # print the DDL instead
    celery -A shop durable sweep            # one sweep now (workers sweep on their own)
"""

from __future__ import annotations

from typing import Any

import click

from .extension import Durable, durables_of


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
