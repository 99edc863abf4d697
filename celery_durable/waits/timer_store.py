"""Moving a namespace's timers, for tests (``celery_durable.testing``'s clock): part
of the waits area (``store.waits``); the SQL is in ``waits/timer_statements.py``.

The database's clock can't be set, so the timers move instead: every due time of a waiting
run, every run's deadline and every deadline a waiting step recorded comes ``seconds``
earlier, in one transaction. To the engine that is the clock having moved on.
"""

from __future__ import annotations

import json
from typing import Protocol

from celery_durable.store.db.connections import Connections
from celery_durable.store.sql.build import params
from celery_durable.waits.timer_statements import TimerStatements


class TimerSql(Protocol):
    """The statements timers are moved with (the waits area's)."""

    timers: TimerStatements


class TimerOps:
    db: Connections
    sql: TimerSql

    def bring_timers_forward(self, seconds: float) -> int:
        """Move this namespace's timers ``seconds`` earlier; returns the waits moved."""
        sql = self.sql.timers
        moved = params(seconds=float(seconds))
        with self.db.transaction() as conn:
            conn.execute(sql.bring_waits_forward, moved)
            conn.execute(sql.bring_deadlines_forward, moved)
            waits = 0
            for row in conn.execute(sql.waiting_steps).all():
                recorded = json.loads(row.output or "{}")
                if not isinstance(recorded, dict) or recorded.get("deadline") is None:
                    continue  # a wait for a signal with no timeout
                recorded["deadline"] = float(recorded["deadline"]) - float(seconds)
                conn.execute(
                    sql.rewrite_waiting_step,
                    params(run_id=row.run_id, idx=row.idx, output=json.dumps(recorded)),
                )
                waits += 1
        return waits
