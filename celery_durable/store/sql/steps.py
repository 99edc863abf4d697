"""The statements of a run's steps: record, load and check them.

Example::

    sql = StepStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.record_step     # a fenced INSERT ... ON CONFLICT DO UPDATE ... RETURNING idx
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import StepRecord
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, columns_of


class StepStatements(Builder):
    """Record, load and check the steps of a run."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, steps = tables.runs, tables.steps
        self._columns = columns_of(steps, StepRecord)
        of_run = and_(steps.c.namespace == namespace, steps.c.run_id == bindparam("p_run_id"))
        self.load_steps = select(*self._columns).where(of_run).order_by(steps.c.idx)
        self.get_step = select(*self._columns).where(of_run, steps.c.idx == bindparam("p_idx"))
        # SQLite runs this first in the same BEGIN IMMEDIATE transaction as the write.
        self.check_live = select(runs.c.id, runs.c.cancel_requested).where(self.fenced)
        self.check_live_locked = self.dialect.for_update(self.check_live)

        # Insert-or-verify: a stored "ok" row is never overwritten; a failed or waiting
        # frontier step is.
        self.record_step = self.fenced_upsert(
            steps,
            self.step_row(),
            conflict=[steps.c.namespace, steps.c.run_id, steps.c.idx],
            updates=("name", "status", "input", "output", "error", "created_at"),
            where=steps.c.status != "ok",
            computed=self.step_resumed,
        ).returning(steps.c.idx)
        self.last_step_output = (
            select(steps.c.output)
            .where(of_run, steps.c.status == "ok")
            .order_by(steps.c.idx.desc())
            .limit(1)
        )
