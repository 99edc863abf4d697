"""``celery -A app durable limiters``: each limiter key's slots in use, its waiters, the
oldest wait and the tokens left; and the lines and JSON the command and the dashboard show.

Example::

    durable_group.add_command(limiters_command(find_durable))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from celery_durable.limiters.operations import LimiterOperations
from celery_durable.limiters.usage import LimiterUsage
from celery_durable.ops.cli_errors import database_error
from celery_durable.ops.console import span, table
from celery_durable.ops.operations import Operations
from celery_durable.ops.wing_parts import DashboardSection


def usage_json(usage: LimiterUsage, limits: dict[str, Any]) -> dict[str, Any]:
    limit = limits.get(usage.limiter)
    return {
        "limiter": usage.limiter,
        "key": usage.key,
        "concurrency": None if limit is None else limit.concurrency,
        "rate_per_second": None if limit is None else limit.rate,
        "in_use": usage.in_use,
        "waiting": usage.waiting,
        "oldest_wait_seconds": usage.oldest_wait,
        "tokens": usage.tokens,
    }


def usages_shown(operations: Operations) -> list[dict[str, Any]]:
    """The limiters section of the dashboard's workflows page: each key's ``usage_json``."""
    limiters = LimiterOperations.of(operations)
    limits = limiters.declared_limits()
    return [usage_json(usage, limits) for usage in limiters.limiter_usage()]


# The workflows page's ``limiters``, registered with the dashboard by wiring.py.
LIMITERS_SECTION = DashboardSection("workflows", "limiters", usages_shown)


def usage_lines(usages: Sequence[LimiterUsage], limits: dict[str, Any]) -> list[str]:
    if not usages:
        return ["no limiter has been used yet"]
    rows = []
    for usage in usages:
        limit = limits.get(usage.limiter)
        slots = "" if limit is None or limit.concurrency is None else f"/{limit.concurrency}"
        tokens = "-" if usage.tokens is None else f"{usage.tokens:.1f}"
        rows.append(
            [
                usage.limiter,
                usage.key or "-",
                f"{usage.in_use}{slots}",
                str(usage.waiting),
                span(usage.oldest_wait) if usage.oldest_wait is not None else "-",
                tokens,
            ]
        )
    return table(["LIMITER", "KEY", "IN USE", "WAITING", "OLDEST WAIT", "TOKENS"], rows, right=4)


def limiters_command(find: Callable[[click.Context], LimiterOperations]) -> click.Command:
    """The command, reading the operations (the Durable) ``find`` returns for the context."""

    @click.command(name="limiters", help="Each limiter: slots in use, waiters, tokens left.")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per limiter key.")
    @click.pass_context
    def limiters(ctx: click.Context, as_json: bool) -> None:
        instance = find(ctx)
        limits = instance.declared_limits()
        try:
            usages = instance.limiter_usage()
        except Exception as exc:
            where = "cannot read the limiters"
            error = database_error(exc, instance.runtime.store, where)
            raise error or click.ClickException(f"{where}: {exc}") from None
        if as_json:
            for usage in usages:
                click.echo(json.dumps(usage_json(usage, limits)))
            return
        for line in usage_lines(usages, limits):
            click.echo(line)

    return limiters
