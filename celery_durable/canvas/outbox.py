"""The canvas wing's store area, held as ``store.canvas``: take the reports that settled
runs still owe Celery, clear the ones made. It builds its statements
(``canvas/outbox_statements.py``) once per store; the entry itself is written by the
kernel's settle statement. The kernel clears entries through ``REPORTS_CLEARED``.

Example::

    for owed in CANVAS.of(store).take_owed_reports(grace=60.0, limit=100):
        report(owed)
    CANVAS.of(store).clear_reported([owed.id])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_durable.canvas.outbox_statements import OutboxStatements
from celery_durable.store.areas import AreaKey
from celery_durable.store.records import OwedReport
from celery_durable.store.sql.build import params
from celery_durable.store.store import Store


class CanvasArea:
    """The outbox of settled runs: taken when overdue, cleared once reported."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.sql = OutboxStatements(store.tables, store.dialect, store.namespace, store.dispatcher)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return ()

    def take_owed_reports(self, grace: float, limit: int) -> list[OwedReport]:
        """The runs of this store's broker whose report has been owed for ``grace``
        seconds (up to ``limit``); each is due again a grace later unless cleared."""
        with self.db.write() as conn:
            rows = conn.execute(self.sql.take_owed_reports, params(grace=grace, limit=limit)).all()
        return [OwedReport(*row) for row in rows]

    def take_owed_report(self, run_id: str) -> OwedReport | None:
        """The run's report, if it owes one (a cancel that settled it just now)."""
        with self.db.write() as conn:
            row = conn.execute(self.sql.take_owed_report, params(run_id=run_id)).first()
        return None if row is None else OwedReport(*row)

    def clear_reported(self, run_ids: Sequence[str]) -> None:
        """The reports of ``run_ids`` are made: one statement for the batch."""
        if not run_ids:
            return
        with self.db.write(borrow=True) as conn:
            conn.execute(self.sql.clear_reported, params(ids=sorted(set(run_ids))))


CANVAS: AreaKey[CanvasArea] = AreaKey("canvas", CanvasArea)
