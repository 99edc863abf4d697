"""The statements that move a namespace's timers (for tests: ``Store.bring_timers_forward``):
the due times of waiting runs, the deadlines of active runs, and the deadlines that waiting
steps recorded, as if the clock had moved on.

Example::

    sql = TimerStatements(build_tables("durable_"), dialect_of("sqlite"), "default")
    sql.bring_waits_forward      # UPDATE runs SET due_at = due_at - :p_seconds ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import FINISHED_STATUSES, Tables
from celery_durable.store.sql.build import Builder


class TimerStatements(Builder):
    """Move the timers of one namespace ``p_seconds`` earlier."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, steps = tables.runs, tables.steps
        seconds: Any = bindparam("p_seconds")
        self.bring_waits_forward = (
            update(runs)
            .where(runs.c.namespace == namespace, runs.c.status == "WAITING")
            .where(runs.c.due_at.isnot(None))
            .values(due_at=runs.c.due_at - seconds)
        )
        self.bring_deadlines_forward = (
            update(runs)
            .where(runs.c.namespace == namespace, runs.c.status.notin_(FINISHED_STATUSES))
            .where(runs.c.deadline_at.isnot(None))
            .values(deadline_at=runs.c.deadline_at - seconds)
        )
        self.waiting_steps = select(steps.c.run_id, steps.c.idx, steps.c.output).where(
            steps.c.namespace == namespace, steps.c.status == "waiting"
        )
        self.rewrite_waiting_step = (
            update(steps)
            .where(
                and_(
                    steps.c.namespace == namespace,
                    steps.c.run_id == bindparam("p_run_id"),
                    steps.c.idx == bindparam("p_idx"),
                    steps.c.status == "waiting",
                )
            )
            .values(output=bindparam("p_output"))
        )
