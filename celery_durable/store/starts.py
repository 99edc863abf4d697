"""The Store's operations of a start that names an active run (the run of a dedup key, a
debounced start that moves it and replaces its arguments) or limits its time (the runs past
their deadline). Mixed into
``Store``; the SQL is in ``sql/runs.py``.

Example::

    existing = store.find_active_dedup("shop.sync_user", "user-42")
    store.debounce_run(existing, '[[42],{}]', delay=30.0, max_wait=None)
"""

from __future__ import annotations

from celery_durable.store.db.connections import Connections
from celery_durable.store.sql.build import params
from celery_durable.store.sql.statements import Statements


class StartOps:
    """Dedup keys and debounced starts."""

    db: Connections
    sql: Statements

    def find_active_dedup(self, name: str, dedup_key: str) -> str | None:
        """The id of the active (PENDING, RUNNING or WAITING) run of workflow ``name`` with
        ``dedup_key``; None once it has finished (the key is free again)."""
        row = self.db.one(self.sql.runs.find_active_dedup, params(name=name, dedup_key=dedup_key))
        return None if row is None else str(row[0])

    def debounce_run(self, run_id: str, args: str, delay: float, max_wait: float | None) -> bool:
        """A run that hasn't started: its start moves to ``delay`` seconds from now (at most
        ``max_wait`` after it was created) and it takes ``args``. False once it started."""
        values = params(run_id=run_id, args=args, delay=delay, max_wait=max_wait)
        with self.db.write() as conn:
            return conn.execute(self.sql.runs.debounce_run, values).first() is not None

    def overdue_runs(self, limit: int) -> list[str]:
        """Active runs past their deadline (``timeout=``) and not told to stop yet."""
        with self.db.read() as conn:
            return list(conn.execute(self.sql.runs.overdue_runs, params(limit=limit)).scalars())
