"""The Store's outbox operations: take the reports that settled runs still owe Celery,
clear the ones made. Mixed into ``Store``; the SQL is in
``canvas/outbox_statements.py``.

Example::

    for owed in store.take_owed_reports(grace=60.0, limit=100):
        report(owed)
    store.clear_reported([owed.id])
"""

from __future__ import annotations

from collections.abc import Sequence

from celery_durable.store.db.connections import Connections
from celery_durable.store.records import OwedReport
from celery_durable.store.sql.build import params
from celery_durable.store.sql.statements import Statements


class OutboxOps:
    """The outbox of settled runs: taken when overdue, cleared once reported."""

    db: Connections
    sql: Statements

    def take_owed_reports(self, grace: float, limit: int) -> list[OwedReport]:
        """The runs of this store's broker whose report has been owed for ``grace``
        seconds (up to ``limit``); each is due again a grace later unless cleared."""
        with self.db.write() as conn:
            rows = conn.execute(
                self.sql.outbox.take_owed_reports, params(grace=grace, limit=limit)
            ).all()
        return [OwedReport(*row) for row in rows]

    def take_owed_report(self, run_id: str) -> OwedReport | None:
        """The run's report, if it owes one (a cancel that settled it just now)."""
        with self.db.write() as conn:
            row = conn.execute(self.sql.outbox.take_owed_report, params(run_id=run_id)).first()
        return None if row is None else OwedReport(*row)

    def clear_reported(self, run_ids: Sequence[str]) -> None:
        """The reports of ``run_ids`` are made: one statement for the batch."""
        if not run_ids:
            return
        with self.db.write(borrow=True) as conn:
            conn.execute(self.sql.outbox.clear_reported, params(ids=sorted(set(run_ids))))
