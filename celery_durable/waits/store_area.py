"""The waits wing's store area, held as ``store.waits``: signals, timers and the values a
workflow publishes (``set_state``), with their statements, built once per store.

Its ``on_cancelled`` statement (drop the run's pending signals) runs in the kernel's
``cancel_run`` transaction. ``set_state`` keeps its one statement (or one pipelined
transaction with deferred records) through the kernel's ``one_carrying``.

Example::

    WAITS.of(store).insert_signal("r1", "approval", '{"by":"alice"}', None, 100)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_durable.store.areas import AreaKey
from celery_durable.store.records import StepRecord
from celery_durable.store.sql.build import params, write_carried
from celery_durable.store.store import Store
from celery_durable.waits.signal_statements import SignalStatements
from celery_durable.waits.signal_store import SignalOps
from celery_durable.waits.state_statements import StateStatements
from celery_durable.waits.timer_statements import TimerStatements
from celery_durable.waits.timer_store import TimerOps


class WaitStatements:
    """The wing's statement groups, and the kernel's step statements it writes with."""

    def __init__(self, store: Store) -> None:
        tables, dialect, namespace = store.tables, store.dialect, store.namespace
        self.signals = SignalStatements(tables, dialect, namespace)
        self.state = StateStatements(tables, dialect, namespace)
        self.timers = TimerStatements(tables, dialect, namespace)
        self.steps = store.sql.steps


class WaitsArea(SignalOps, TimerOps):
    """Signals, timers and published values of one store's namespace."""

    sql: WaitStatements

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.sql = WaitStatements(store)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return (self.sql.signals.cancel_run_drop_signals,)

    def set_state(
        self, run_id: str, fence: int, key: str, value: str, carried: Sequence[StepRecord] = ()
    ) -> bool:
        """Upsert a queryable value, only while the caller holds the lease; ``carried``:
        deferred steps' records, written in the same transaction."""
        store = self.store
        values = params(run_id=run_id, fence=fence, key=key, value=value)
        if store.dialect.locks_rows:  # the statement checks the lease itself
            row = store.one_carrying(self.sql.state.set_state, values, run_id, fence, carried)
            return row is not None
        with self.db.write() as conn:
            if not store.is_live(conn, values):
                return False
            # Checked live just above: the records go in without a second check.
            write_carried(conn, self.sql.steps.record_step, run_id, fence, carried)
            return conn.execute(self.sql.state.set_state, values).first() is not None

    def get_state(self, run_id: str, key: str) -> str | None:
        with self.db.read() as conn:
            values = params(run_id=run_id, key=key)
            value: str | None = conn.execute(self.sql.state.get_state, values).scalar()
            return value


WAITS: AreaKey[WaitsArea] = AreaKey("waits", WaitsArea)
