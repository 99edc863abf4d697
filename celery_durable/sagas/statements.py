"""The statements of long-lived workflows: sagas' rollback writes and continue_as_new.

Example::

    sql = LongLivedStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.continue_as_new_reset     # UPDATE runs ... RETURNING the run to publish
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, literal, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueRun
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, columns_of


class LongLivedStatements(Builder):
    """Compensation writes (fenced, allowed after cancel) and continue_as_new's parts."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        self._rollback()
        self._continue_as_new()
        self._nesting()

    def _rollback(self) -> None:
        """A saga's rollback: fenced writes allowed after a cancel."""
        runs, steps = self.tables.runs, self.tables.steps
        # A rollback records its steps after a cancel was requested: only the fence counts.
        self.record_fenced_step = self.fenced_upsert(
            steps,
            self.step_row(),
            conflict=[steps.c.namespace, steps.c.run_id, steps.c.idx],
            updates=(
                *("name", "status", "input", "output", "error"),
                *("created_at", "duration", "started_at", "attempt"),
            ),
            where=steps.c.status != "ok",
            guard=self.fenced,
        ).returning(steps.c.idx)
        self.check_fenced = select(runs.c.id).where(self.fenced)
        self.mark_compensable = (
            update(runs).where(self.fenced).values(compensable=True).returning(runs.c.id)
        )
        self.set_compensation = (
            update(runs)
            .where(self.fenced)
            .values(compensation=bindparam("p_compensation"))
            .returning(runs.c.id)
        )

    def _continue_as_new(self) -> None:
        """End a generation (archived with its history) and start the next."""
        runs, steps, items, now = self.tables.runs, self.tables.steps, self.tables.items, self.now
        namespace = self.namespace
        lock = select(runs.c.generation, runs.c.cancel_requested).where(self.fenced)
        self.continue_as_new_lock = self.dialect.for_update(lock)
        # The finished generation becomes a SUCCEEDED run of its own (gc collects it like
        # any finished run), holding the history, linked both ways.
        copied: dict[str, Any] = {
            "namespace": runs.c.namespace,
            "id": bindparam("p_archive_id"),
            "name": runs.c.name,
            "status": literal("SUCCEEDED"),
            "queue": runs.c.queue,
            "args": runs.c.args,
            "attempts": runs.c.attempts,
            "max_attempts": runs.c.max_attempts,
            "recoveries": runs.c.recoveries,
            "retry_backoff": runs.c.retry_backoff,
            "fence": runs.c.fence,
            "dispatches": runs.c.dispatches,
            "cancel_requested": runs.c.cancel_requested,
            "created_at": runs.c.created_at,
            "started_at": runs.c.started_at,
            "finished_at": now,
            "updated_at": now,
            "generation": runs.c.generation,
            "continued_from": runs.c.continued_from,
            "continued_as": runs.c.id,
        }
        self.continue_as_new_archive = self.insert(runs).from_select(
            list(copied), select(*copied.values()).where(self.fenced)
        )
        self.continue_as_new_move_steps = (
            update(steps)
            .where(steps.c.namespace == namespace, steps.c.run_id == bindparam("p_run_id"))
            .values(run_id=bindparam("p_archive_id"))
        )
        self.continue_as_new_move_items = (
            update(items)
            .where(items.c.namespace == namespace, items.c.run_id == bindparam("p_run_id"))
            .values(run_id=bindparam("p_archive_id"))
        )
        self.continue_as_new_reset = (
            update(runs)
            .where(self.fenced)
            .values(
                args=bindparam("p_args"),
                status="PENDING",
                owner=None,
                attempts=0,
                recoveries=0,
                dispatches=0,
                ready_at=None,
                due_at=now + bindparam("p_grace"),
                wait_signal=None,
                wait_items=False,
                result=None,
                error=None,
                compensable=False,
                compensation=None,
                generation=runs.c.generation + 1,
                continued_from=bindparam("p_archive_id"),
                updated_at=now,
            )
            .returning(*columns_of(runs, DueRun))
        )

    def _nesting(self) -> None:
        """How many ancestors a run has (its parents, theirs...), counted up to
        ``p_limit``: one recursive query, each round a primary-key lookup."""
        runs = self.tables.runs
        chain = (
            select(runs.c.parent_id, literal(0).label("depth"))
            .where(self.run_is)
            .cte("chain", recursive=True)
        )
        parent = runs.alias("parent")
        chain = chain.union_all(
            select(parent.c.parent_id, chain.c.depth + 1).where(
                parent.c.namespace == self.namespace,
                parent.c.id == chain.c.parent_id,
                chain.c.depth < bindparam("p_limit"),
            )
        )
        self.count_ancestors = select(func.max(chain.c.depth))
