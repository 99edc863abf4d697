"""The outbox's statements: the settled runs that still owe Celery their report (the
result backend's final state, the callbacks, the rest of the chain, the chord's part).

A run with a canvas gets its entry (``outbox_at``) in the statement that finishes it; the
worker that settled it reports it and clears the entry, a batch at a time. These take the
entries that stayed owed (a worker died between its settle and its report) and clear them.

Example::

    sql = OutboxStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.take_owed_reports     # UPDATE ... RETURNING the runs to report
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import OwedReport
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, columns_of


class OutboxStatements(Builder):
    """Take the reports still owed, one run's or the overdue ones; clear reported ones."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        runs, now = tables.runs, self.now
        owed = columns_of(runs, OwedReport)
        overdue = (
            select(runs.c.id)
            .where(
                self.ns,
                runs.c.outbox_at.isnot(None),
                runs.c.outbox_at <= self.dialect.stable_now - bindparam("p_grace"),
                self.here(runs.c.dispatcher),
            )
            .order_by(runs.c.outbox_at)
            .limit(bindparam("p_limit"))
        )
        if self.dialect.locks_rows:
            # As the sweep's: a materialised CTE locks exactly the rows it returns, and two
            # sweepers never take one entry.
            taken = (
                overdue.with_for_update(skip_locked=True).cte("owed").prefix_with("MATERIALIZED")
            )
            picked = runs.c.id == taken.c.id
        else:
            picked = runs.c.id.in_(overdue.scalar_subquery())
        # Taking an entry moves it to now: a sweeper that dies reporting leaves it owed,
        # due again a grace later.
        self.take_owed_reports = (
            update(runs).where(self.ns, picked).values(outbox_at=now).returning(*owed)
        )
        self.take_owed_report = (
            update(runs)
            .where(self.run_is, runs.c.outbox_at.isnot(None))
            .values(outbox_at=now)
            .returning(*owed)
        )
        self.clear_reported = (
            update(runs)
            .where(
                and_(self.ns, runs.c.id.in_(bindparam("p_ids", expanding=True))),
                runs.c.outbox_at.isnot(None),
            )
            .values(outbox_at=None)
        )
