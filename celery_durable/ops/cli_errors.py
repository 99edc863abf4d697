"""Database errors of ``celery -A app durable ...`` as click's one ``Error:`` line: a
database that doesn't exist, refuses the credentials or lacks the tables says what to do,
at once; one that can't be reached says so (``show`` retries that for a while first).

Example::

    @click.group(cls=DurableGroup, name="durable")
    def durable() -> None: ...
"""

from __future__ import annotations

from typing import Any

import click

from celery_durable.engine.runtime import bound_runtimes
from celery_durable.errors import DurableError
from celery_durable.store import Store
from celery_durable.store.db.outage import describe, is_unreachable, unavailable
from celery_durable.store.db.unusable import unusable


def database_error(exc: BaseException, store: Store, where: str) -> click.ClickException | None:
    """``where`` failing with ``exc`` as one line naming the database and the fix; None
    when ``exc`` isn't about the database (a bug: its traceback is wanted)."""
    problem = unusable(exc, store.table_prefix)
    if problem is not None:
        database = describe(store.url)
        return click.ClickException(
            f"{where}: the database {database} is not usable ({problem.text}): {problem.fix()}"
        )
    if is_unreachable(exc):
        return click.ClickException(str(unavailable(exc, store.url, where)))
    return None


class DurableGroup(click.Group):
    """The ``durable`` command group: a database error that a command doesn't turn into
    its own message becomes one line naming the fix instead of SQLAlchemy's traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            error = self._one_line(ctx, exc)
            if error is None:
                raise
            raise error from None

    @staticmethod
    def _one_line(ctx: click.Context, exc: Exception) -> click.ClickException | None:
        if isinstance(exc, click.ClickException | click.exceptions.Exit | click.Abort):
            return None
        where = f"durable {ctx.invoked_subcommand or ''}".rstrip()
        if isinstance(exc, DurableError):  # a setting (a bad URL scheme) or a refusal
            return click.ClickException(f"{where}: {exc}")
        app = getattr(ctx.obj, "app", None)
        for runtime in bound_runtimes(app) if app is not None else []:
            error = database_error(exc, runtime.store, where)
            if error is not None:
                return error
        return None
