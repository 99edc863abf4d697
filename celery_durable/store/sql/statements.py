"""Every SQL statement of celery_durable, built once per store, grouped by area.

Each attribute is named after the :class:`~celery_durable.store.store.Store` method that
runs it (or, for a method that runs several, ``<method>_<part>``). Building them once lets
SQLAlchemy's compiled cache (and the psycopg fast path) serve every call. Bind names carry
a ``p_`` prefix, since SQLAlchemy reserves column names in VALUES/SET.

Example::

    sql = Statements(build_tables("durable_"), "postgresql", "default")
    sql.runs.claim_run       # UPDATE ... RETURNING fence, attempts, ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    and_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    or_,
    select,
    true,
    update,
)

from celery_durable.store.items_first import OpenItemStatements
from celery_durable.store.records import RunRecord, StepRecord
from celery_durable.store.schema import ACTIVE_STATUSES, Tables
from celery_durable.store.sql.admin import OperationStatements
from celery_durable.store.sql.build import Builder, columns_of
from celery_durable.store.sql.carry import CarryStatements
from celery_durable.store.sql.items import ItemStatements
from celery_durable.store.sql.state import StateStatements
from celery_durable.store.sql.sweep import SweepStatements


class RunStatements(Builder):
    """Start, claim, settle, retry, release and read a run."""

    def __init__(
        self, tables: Tables, dialect: str, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        runs, steps, now = tables.runs, tables.steps, self.now
        start_delay = bindparam("p_start_delay", type_=Float)
        new_run = {
            "namespace": namespace,
            "id": bindparam("p_id"),
            "name": bindparam("p_name"),
            "status": "PENDING",
            "queue": bindparam("p_queue"),
            "args": bindparam("p_args"),
            "attempts": 0,
            "max_attempts": bindparam("p_max_attempts"),
            "retry_backoff": bindparam("p_retry_backoff"),
            "fence": 0,
            "ready_at": case((start_delay.is_(None), None), else_=now + start_delay),
            "due_at": now + func.coalesce(start_delay, bindparam("p_grace")),
            "dispatches": 0,
            "cancel_requested": False,
            "created_at": now,
            "updated_at": now,
            "dispatcher": dispatcher,
        }
        self.insert_run = (
            self.insert(runs).values(new_run).on_conflict_do_nothing().returning(runs.c.id)
        )
        # A child run (in its parent's dispatch transaction); ordinary starts keep the
        # statement above.
        self.insert_child_run = (
            self.insert(runs)
            .values(
                {
                    **new_run,
                    "parent_id": bindparam("p_parent_id"),
                    "parent_idx": bindparam("p_parent_idx"),
                }
            )
            .on_conflict_do_nothing()
            .returning(runs.c.id)
        )

        # A saga whose cancellation was requested is still claimed: it rolls back first.
        claimable = and_(
            or_(runs.c.cancel_requested == false(), runs.c.compensable == true()),
            or_(
                and_(
                    runs.c.status == "PENDING",
                    or_(runs.c.ready_at.is_(None), runs.c.ready_at <= now),
                ),
                and_(
                    runs.c.status == "RUNNING",
                    runs.c.due_at < now,
                    runs.c.recoveries + 1 < bindparam("p_max_recoveries"),
                ),
            ),
        )
        # Taking over an expired lease recovers a lost worker: not a new attempt.
        lost = runs.c.status == "RUNNING"
        # A fencing token that grows and is never handed out twice, even when a claim is
        # lost in a database crash (claims commit asynchronously): the database clock in
        # microseconds, or the old token + 1 if that is larger.
        micros = cast(now * 1_000_000, BigInteger)
        next_fence = (func.greatest if self.is_postgres else func.max)(runs.c.fence + 1, micros)
        # The claimer's broker delivered the run: its sweepers dispatch it from now on
        # (a producer that spelled the broker's URL otherwise hands it over here).
        claimed_through = {} if dispatcher is None else {"dispatcher": dispatcher}
        claim = (
            update(runs)
            .where(self.run_is, claimable)
            .values(
                status="RUNNING",
                owner=bindparam("p_owner"),
                fence=next_fence,
                attempts=runs.c.attempts + case((lost, 0), else_=1),
                recoveries=runs.c.recoveries + case((lost, 1), else_=0),
                due_at=now + bindparam("p_lease"),
                ready_at=None,
                started_at=func.coalesce(runs.c.started_at, now),
                updated_at=now,
                **claimed_through,
            )
        )
        returning = [
            runs.c.fence,
            runs.c.attempts,
            runs.c.max_attempts,
            runs.c.retry_backoff,
            runs.c.args,
            runs.c.queue,
            runs.c.parent_id,
            runs.c.parent_idx,
        ]
        if self.is_postgres:
            has_steps: Any = exists().where(
                steps.c.namespace == namespace, steps.c.run_id == runs.c.id
            )
        else:
            has_steps = literal(True)  # SQLite: one more read costs nothing
        self.claim_run = claim.returning(
            *returning, has_steps.label("has_steps"), runs.c.cancel_requested, runs.c.compensable
        )

        # A run whose cancellation was requested ends CANCELLED, whatever the body did after.
        cancelled = runs.c.cancel_requested == true()
        self.settle_update = (
            update(runs)
            .where(self.fenced)
            .values(
                status=case((cancelled, "CANCELLED"), else_=bindparam("p_status")),
                result=case((cancelled, None), else_=bindparam("p_result")),
                error=case((cancelled, None), else_=bindparam("p_error")),
                owner=None,
                due_at=None,
                ready_at=None,
                wait_signal=None,
                finished_at=now,
                updated_at=now,
            )
        )
        self.settle_run = self.with_notify(
            self.settle_update.returning(runs.c.id, runs.c.status), "id", "status"
        )
        self.schedule_retry = (
            update(runs)
            .where(self.fenced)
            .values(
                status=case((cancelled, "CANCELLED"), else_="PENDING"),
                error=bindparam("p_error"),
                owner=None,
                ready_at=case((cancelled, None), else_=now + bindparam("p_delay")),
                due_at=case((cancelled, None), else_=now + bindparam("p_delay")),
                finished_at=case((cancelled, now), else_=None),
                dispatches=0,
                updated_at=now,
            )
            .returning(runs.c.id, runs.c.status)
        )
        # Giving a lease back (shutdown) does not count as a failed attempt.
        given_back = {
            "status": "PENDING",
            "owner": None,
            "attempts": runs.c.attempts - 1,
            "ready_at": None,
            "due_at": now,
            "dispatches": 0,
            "updated_at": now,
        }
        self.release_run = update(runs).where(self.fenced).values(given_back).returning(runs.c.id)
        owned = and_(
            self.ns,
            runs.c.owner == bindparam("p_owner"),
            runs.c.status == "RUNNING",
            runs.c.id.in_(bindparam("p_ids", expanding=True)),
        )
        self.release_owner = update(runs).where(owned).values(given_back).returning(runs.c.id)
        self.renew_leases = update(runs).where(owned).values(due_at=now + bindparam("p_lease"))
        self.renew_lease = (
            update(runs)
            .where(self.live)
            .values(due_at=now + bindparam("p_lease"))
            .returning(runs.c.id)
        )

        # An idle saga (a run that finished a step with a compensation) is not ended here:
        # it becomes PENDING, due now, for a worker to run its compensations.
        idle_run = runs.c.status.in_(("PENDING", "WAITING"))
        idle = and_(idle_run, runs.c.compensable == false())
        rolls_back = and_(idle_run, runs.c.compensable == true())
        self.cancel_run = (
            update(runs)
            .where(self.run_is, runs.c.status.in_(ACTIVE_STATUSES))
            .values(
                cancel_requested=True,
                cancel_reason=bindparam("p_reason"),
                status=case((idle, "CANCELLED"), (rolls_back, "PENDING"), else_=runs.c.status),
                finished_at=case((idle, now), else_=runs.c.finished_at),
                due_at=case((idle, None), (rolls_back, now), else_=runs.c.due_at),
                ready_at=case((rolls_back, None), else_=runs.c.ready_at),
                wait_signal=case((idle_run, None), else_=runs.c.wait_signal),
                wait_items=False,
                updated_at=now,
            )
            .returning(runs.c.status)
        )

        # A run whose first publish failed: any broker's sweeper may publish it.
        self.disown_run = (
            update(runs)
            .where(self.run_is, runs.c.status == "PENDING", runs.c.started_at.is_(None))
            .values(dispatcher=None)
        )

        self.get_run = select(*columns_of(runs, RunRecord)).where(self.run_is)
        self.get_status = select(runs.c.status).where(self.run_is)
        self.now_value = select(now)


class StepStatements(Builder):
    """Record, load and check the steps of a run."""

    def __init__(self, tables: Tables, dialect: str, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, steps = tables.runs, tables.steps
        self.columns = columns_of(steps, StepRecord)
        of_run = and_(steps.c.namespace == namespace, steps.c.run_id == bindparam("p_run_id"))
        self.load_steps = select(*self.columns).where(of_run).order_by(steps.c.idx)
        self.get_step = select(*self.columns).where(of_run, steps.c.idx == bindparam("p_idx"))
        # SQLite runs this first in the same BEGIN IMMEDIATE transaction as the write.
        self.check_live = select(runs.c.id, runs.c.cancel_requested).where(self.fenced)
        self.check_live_locked = (
            self.check_live.with_for_update() if self.is_postgres else self.check_live
        )

        # Insert-or-verify: a stored "ok" row is never overwritten; a failed or waiting
        # frontier step is.
        self.record_step = self.fenced_upsert(
            steps,
            self.step_row(),
            conflict=[steps.c.namespace, steps.c.run_id, steps.c.idx],
            updates=("name", "status", "input", "output", "error", "created_at"),
            where=steps.c.status != "ok",
            computed=self.step_resumed,
        ).returning(steps.c.idx)
        self.last_step_output = (
            select(steps.c.output)
            .where(of_run, steps.c.status == "ok")
            .order_by(steps.c.idx.desc())
            .limit(1)
        )


class SignalStatements(Builder):
    """Store, refuse, consume and wait for signals."""

    def __init__(self, tables: Tables, dialect: str, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, signals, now = tables.runs, tables.signals, self.now
        mine = and_(signals.c.namespace == namespace, signals.c.run_id == bindparam("p_run_id"))
        pending = and_(mine, signals.c.consumed_at.is_(None))
        # Locking the run row serialises the pending-signals cap between senders.
        lock = select(runs.c.status).where(self.run_is)
        self.insert_signal_lock_run = lock.with_for_update() if self.is_postgres else lock
        self.insert_signal_find_key = select(signals.c.id).where(
            mine, signals.c.idempotency_key == bindparam("p_key")
        )
        self.insert_signal_count_pending = select(func.count()).select_from(signals).where(pending)
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
        self.consume_signal_oldest = oldest.with_for_update() if self.is_postgres else oldest
        self.consume_signal_mark = (
            update(signals).where(signals.c.id == bindparam("p_id")).values(consumed_at=now)
        )
        self.suspend_run_has_signal = (
            select(signals.c.id).where(pending, signals.c.name == bindparam("p_name")).limit(1)
        )
        self.suspend_run = (
            update(runs)
            .where(self.run_is, runs.c.fence == bindparam("p_fence"))
            .values(
                status="WAITING",
                owner=None,
                wait_signal=bindparam("p_signal"),
                due_at=bindparam("p_wake_at", type_=Float),
                attempts=runs.c.attempts - 1,
                dispatches=0,
                updated_at=now,
            )
        )
        self.cancel_run_drop_signals = (
            update(signals)
            .where(pending)
            .values(consumed_at=now, error="dropped: the run was cancelled")
        )


class Statements:
    """All statements of one store (tables, dialect, namespace, the app's broker)."""

    def __init__(
        self, tables: Tables, dialect: str, namespace: str, dispatcher: str | None = None
    ) -> None:
        self.runs = RunStatements(tables, dialect, namespace, dispatcher)
        self.steps = StepStatements(tables, dialect, namespace)
        self.carry = CarryStatements(tables, dialect, namespace, self.runs)
        self.sweep = SweepStatements(tables, dialect, namespace, dispatcher)
        self.signals = SignalStatements(tables, dialect, namespace)
        self.state = StateStatements(tables, dialect, namespace)
        self.items = ItemStatements(tables, dialect, namespace, dispatcher)
        self.open_items = OpenItemStatements(tables, dialect, namespace)
        self.ops = OperationStatements(tables, dialect, namespace, dispatcher)
        self.notify = self.runs.notify
