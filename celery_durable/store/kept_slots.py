"""A limited step's record that keeps its slot for the run's next step (the SQL is in
``sql/kept_slots.py``): one transaction, one round trip on Postgres, so the next step of
the run behind the same limiter and key starts without a take of its own. Mixed into
:class:`~celery_durable.store.store.Store`.

Example::

    written, kept = store.record_step_keeping_slot(run_id, fence, record, limit, "", 4)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from celery_durable.store.db.connections import Connections
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.limits import Limit
from celery_durable.store.records import Outcome, StepRecord, StepWrite
from celery_durable.store.sql.build import params, step_params
from celery_durable.store.sql.statements import Statements


class KeptSlotOps:
    """``record_step`` that keeps the step's slot for the run's next step."""

    db: Connections
    dialect: Dialect
    sql: Statements
    _record_step_on: Callable[[Connection, dict[str, Any]], bool]
    _diagnose_step: Callable[[str, int, int], StepWrite]

    def record_step_keeping_slot(
        self, run_id: str, fence: int, step: StepRecord, limit: Limit, key: str, next_idx: int
    ) -> tuple[StepWrite, bool]:
        """Write the step (as ``record_step``, under the fence) and, in the same
        transaction, move the slot of ``limit``'s ``key`` it holds to the run's step
        ``next_idx``, unless other runs wait for the key. Returns the write's outcome and
        whether the slot was kept (else it is free, as after any record)."""
        values = step_params(run_id, fence, step)
        keep = {
            **values,
            **params(limiter=limit.name, key=key, concurrency=limit.concurrency, next=next_idx),
        }
        statement = self.sql.kept_slots.keep_slot_for_next_step
        if self.dialect.pipelines:
            written, kept = self.db.transaction_pipeline(
                [(self.sql.steps.record_step, values), (statement, keep)]
            )
            recorded = written is not None
        else:
            with self.db.write() as conn:
                recorded = self._record_step_on(conn, values)
                kept = conn.execute(statement, keep).first() if recorded else None
        if recorded:
            return StepWrite(Outcome.RECORDED), kept is not None
        return self._diagnose_step(run_id, fence, step.idx), False
