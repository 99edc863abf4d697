"""The statements of signals: store, refuse, consume and wait for them.

Example::

    sql = SignalStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.insert_signal   # INSERT INTO signals ...
"""

from __future__ import annotations

from sqlalchemy import Float, and_, bindparam, delete, exists, func, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder


class SignalStatements(Builder):
    """Store, refuse, consume and wait for signals."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, signals, now = tables.runs, tables.signals, self.now
        mine = and_(signals.c.namespace == namespace, signals.c.run_id == bindparam("p_run_id"))
        pending = and_(mine, signals.c.consumed_at.is_(None))
        # Locking the run row serialises the pending-signals cap between senders.
        lock = select(runs.c.status).where(self.run_is)
        self.insert_signal_lock_run = self.dialect.for_update(lock)
        self.insert_signal_find_key = select(signals.c.id).where(
            mine, signals.c.idempotency_key == bindparam("p_key")
        )
        self.insert_signal_count_pending = select(func.count()).select_from(signals).where(pending)
        # Refused signals kept for inspection: bounded per run like the pending ones.
        self.reject_signal_count_kept = (
            select(func.count()).select_from(signals).where(mine, signals.c.error.isnot(None))
        )
        # Signals whose run is gone (kept by versions that stored refusals for runs that
        # never existed): gc deletes them in batches.
        orphans = (
            select(signals.c.id)
            .where(
                signals.c.namespace == namespace,
                signals.c.created_at < bindparam("p_cutoff", type_=Float),
                ~exists().where(runs.c.namespace == namespace, runs.c.id == signals.c.run_id),
            )
            .order_by(signals.c.id)
        )
        self.gc_orphan_signals = delete(signals).where(
            signals.c.id.in_(orphans.limit(bindparam("p_batch")).scalar_subquery())
        )
        self.count_orphan_signals = select(func.count()).select_from(
            orphans.order_by(None).subquery()
        )
        row = {
            "namespace": namespace,
            "run_id": bindparam("p_run_id"),
            "name": bindparam("p_name"),
            "payload": bindparam("p_payload"),
            "created_at": now,
        }
        self.insert_signal = self.insert(signals).values(**row, idempotency_key=bindparam("p_key"))
        self.reject_signal = self.insert(signals).values(
            **row, idempotency_key=None, consumed_at=now, error=bindparam("p_error")
        )
        oldest = (
            select(signals.c.id, signals.c.payload)
            .where(pending, signals.c.name == bindparam("p_name"))
            .order_by(signals.c.id)
            .limit(1)
        )
        self.consume_signal_oldest = self.dialect.for_update(oldest)
        self.consume_signal_mark = (
            update(signals).where(signals.c.id == bindparam("p_id")).values(consumed_at=now)
        )
        self.suspend_run_has_signal = (
            select(signals.c.id).where(pending, signals.c.name == bindparam("p_name")).limit(1)
        )
        self.suspend_run = self.suspend_waiting()
        self.cancel_run_drop_signals = (
            update(signals)
            .where(pending)
            .values(consumed_at=now, error="dropped: the run was cancelled")
        )
