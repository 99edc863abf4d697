"""The Store's operations on signals: store, refuse and consume them, and suspend a run
until one arrives. Part of the waits area (``store.waits``); the SQL is in
``signal_statements`` (``SignalStatements``).

Example::

    stored = store.waits.insert_signal("r1", "approval", '{"by":"alice"}', "approve-r1", 100)
    if stored.outcome is Outcome.STORED: ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from celery_durable.store.db.connections import Connections
from celery_durable.store.records import Outcome, SignalStore, SignalTake, StepRecord
from celery_durable.store.schema import FINISHED_STATUSES
from celery_durable.store.sql.build import hold_run, params, step_params
from celery_durable.store.sql.steps import StepStatements
from celery_durable.waits.signal_statements import SignalStatements


class SignalSql(Protocol):
    """The statements signals are written with (the waits area's)."""

    signals: SignalStatements
    steps: StepStatements


class SignalOps:
    """Signals of a run: the producer's side (insert, reject) and the body's (consume,
    suspend)."""

    db: Connections
    sql: SignalSql

    def insert_signal(
        self,
        run_id: str,
        name: str,
        payload: str,
        idempotency_key: str | None,
        max_pending: int,
    ) -> SignalStore:
        """Store a signal for a run: STORED, DUPLICATE, NOT_FOUND, FULL or FINISHED."""
        sql = self.sql.signals
        values = params(run_id=run_id, name=name, payload=payload, key=idempotency_key)
        with self.db.transaction() as conn:
            status = conn.execute(sql.insert_signal_lock_run, values).scalar()
            if status is None:
                return SignalStore(Outcome.NOT_FOUND)
            if (
                idempotency_key is not None
                and conn.execute(sql.insert_signal_find_key, values).first()
            ):
                return SignalStore(Outcome.DUPLICATE)
            # After the duplicate check: a retried send to a finished run is a no-op.
            if status in FINISHED_STATUSES:
                return SignalStore(Outcome.FINISHED, str(status))
            if conn.execute(sql.insert_signal_count_pending, values).scalar_one() >= max_pending:
                return SignalStore(Outcome.FULL)
            conn.execute(sql.insert_signal, values)
            return SignalStore(Outcome.STORED)

    def reject_signal(
        self,
        run_id: str,
        name: str,
        payload: str,
        idempotency_key: str | None,
        error: str,
        max_kept: int,
    ) -> bool:
        """Keep a signal that could not be delivered, with the reason, for inspection;
        False (not kept) when the run does not exist or already holds ``max_kept``
        refused signals. The run's row lock serialises the count with other senders.

        The key stays free: a resend after the cause is fixed is stored."""
        sql = self.sql.signals
        reason = error if idempotency_key is None else f"{error} (key {idempotency_key})"
        values = params(run_id=run_id, name=name, payload=payload, error=reason)
        with self.db.transaction() as conn:
            if conn.execute(sql.insert_signal_lock_run, values).first() is None:
                return False
            if conn.execute(sql.reject_signal_count_kept, values).scalar_one() >= max_kept:
                return False
            conn.execute(sql.reject_signal, values)
            return True

    def gc_orphan_signals(self, cutoff: float, batch: int) -> int:
        """Delete up to ``batch`` signals older than ``cutoff`` whose run does not exist."""
        values = params(cutoff=cutoff, batch=batch)
        with self.db.write() as conn:
            return int(conn.execute(self.sql.signals.gc_orphan_signals, values).rowcount)

    def count_orphan_signals(self, cutoff: float) -> int:
        """What ``gc_orphan_signals`` would delete for ``cutoff``, all batches."""
        with self.db.read() as conn:
            values = params(cutoff=cutoff)
            return int(conn.execute(self.sql.signals.count_orphan_signals, values).scalar_one())

    def consume_signal(
        self,
        run_id: str,
        fence: int,
        signal_name: str,
        step: StepRecord,
        carried: Sequence[StepRecord] = (),
    ) -> SignalTake:
        """Take the oldest unconsumed signal of this name and record it as ``step``'s
        output, in one transaction: RECORDED (with the payload), NO_SIGNAL, LEASE_LOST or
        CANCELLED. ``carried``: deferred steps' records, committed with it (RECORDED or
        NO_SIGNAL)."""
        sql = self.sql.signals
        values = params(run_id=run_id, fence=fence, name=signal_name)
        with self.db.transaction() as conn:
            refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
            if refused is not None:
                return SignalTake(refused)
            signal = conn.execute(sql.consume_signal_oldest, values).first()
            if signal is None:
                return SignalTake(Outcome.NO_SIGNAL)
            conn.execute(sql.consume_signal_mark, params(id=signal.id))
            # Duration 0 unless the run waited (record_step measures that on conflict).
            taken = StepRecord(step.idx, step.name, "ok", step.input, signal.payload, None, 0.0)
            conn.execute(self.sql.steps.record_step, step_params(run_id, fence, taken))
            return SignalTake(Outcome.RECORDED, str(signal.payload))

    def suspend_run(
        self,
        run_id: str,
        fence: int,
        step: StepRecord,
        wait_signal: str | None,
        wake_at: float | None,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """Record the waiting step and release the run as WAITING, unless a matching
        signal is already there: SUSPENDED, SIGNALLED, LEASE_LOST or CANCELLED.
        ``carried``: deferred steps' records, committed with it in every outcome but the
        last two."""
        sql = self.sql.signals
        values = params(run_id=run_id, fence=fence, name=wait_signal)
        with self.db.transaction() as conn:
            # FOR UPDATE: a concurrent wake-up waits for this transaction, then sees WAITING.
            refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
            if refused is not None:
                return refused
            if wait_signal is not None and conn.execute(sql.suspend_run_has_signal, values).first():
                return Outcome.SIGNALLED
            conn.execute(self.sql.steps.record_step, step_params(run_id, fence, step))
            conn.execute(
                sql.suspend_run,
                params(run_id=run_id, fence=fence, signal=wait_signal, wake_at=wake_at),
            )
            return Outcome.SUSPENDED
