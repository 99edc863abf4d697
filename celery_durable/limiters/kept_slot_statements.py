"""A limited step's slot kept for the run's next step: the record of a step behind a
limiter moves the step's slot row to the run's next step index, in the record's own
transaction, when that step is expected to be behind the same limiter and key. The next
step then runs without a take (a round trip before it). The row is moved only while the
run holds its lease and no other run waits for the key: a kept slot never makes a waiter
wait longer than the step that keeps it.

A kept row counts like any step's slot (``LimiterStatements.slot_live``): it is free, with
no write, once the step at its index is recorded, or the run settles, waits or loses its
lease.

Example::

    sql.kept_slots.keep_slot_for_next_step   # UPDATE slots SET idx = :p_next ... RETURNING slot
    sql.kept_slots.record_step_keeping_slot  # WITH recorded AS (INSERT ...), kept AS (UPDATE ...)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, bindparam, exists, func, not_, select, update

from celery_durable.limiters.statements import others_waiting
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder
from celery_durable.store.sql.steps import StepStatements


class KeptSlotStatements(Builder):
    """``keep_slot_for_next_step``: binds the step's record parameters (``p_run_id``,
    ``p_fence``, ``p_idx``) and ``p_limiter``, ``p_key``, ``p_concurrency``, ``p_next``.
    On Postgres, ``record_step_keeping_slot`` is the step's record and the keep in one
    statement (the record's parameters and the keep's), returning (recorded, kept slot)."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, steps: StepStatements
    ) -> None:
        super().__init__(tables, dialect, namespace)
        slots, grants = tables.limiter_slots, tables.limiter_grants
        limiter: Any = bindparam("p_limiter")
        key: Any = bindparam("p_key")
        run_id: Any = bindparam("p_run_id")
        idx: Any = bindparam("p_idx", type_=Integer)
        waiting = others_waiting(grants, namespace, limiter, key, run_id, idx)

        def keep(live: Any) -> Any:
            return (
                update(slots)
                .where(
                    slots.c.namespace == namespace,
                    slots.c.limiter == limiter,
                    slots.c.key == key,
                    slots.c.run_id == run_id,
                    slots.c.idx == idx,
                    slots.c.slot < bindparam("p_concurrency", type_=Integer),
                    not_(exists().where(waiting)),
                    live,
                )
                .values(idx=bindparam("p_next", type_=Integer), taken_at=self.now)
                .returning(slots.c.slot)
            )

        self.keep_slot_for_next_step = keep(exists().where(self.live))
        self.record_step_keeping_slot: Any = None
        if dialect.locks_rows:
            # One statement rather than a pipelined transaction of two (about 0.17 ms less
            # a record here): the record is written under the lease (it locks the run row),
            # so "recorded" is the keep's lease check too.
            recorded = steps.record_step.cte("recorded")
            kept = keep(exists(select(recorded.c.idx))).cte("kept")
            self.record_step_keeping_slot = select(
                select(func.count()).select_from(recorded).scalar_subquery(),
                select(kept.c.slot).scalar_subquery(),
            )
