"""The sweeper's statements: expired leases, lost publishes, due backoffs and timers,
lost signal wake-ups, and the other brokers seen on the namespace.

Example::

    sql = SweepStatements(build_tables("durable_"), dialect_of("postgresql"), "default", "redis://h:6379/0")
    sql.sweep_due_runs      # UPDATE ... RETURNING the runs to publish again
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Float,
    and_,
    bindparam,
    case,
    exists,
    false,
    literal_column,
    or_,
    select,
    true,
    union,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueRun
from celery_durable.store.schema import FINISHED_STATUSES, Tables
from celery_durable.store.sql.build import Builder, columns_of
from celery_durable.store.sql.operator_statements import settled, status_literal


class SweepStatements(Builder):
    """What the sweeper takes: expired leases, lost publishes, due backoffs and timers."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        runs = tables.runs
        self._due_columns = columns_of(runs, DueRun)
        # A sweeper takes only the workflows its app registered, of the runs of its own
        # broker (dispatched_here): two apps on one database and namespace never dispatch
        # each other's runs, even under the same workflow names.
        self._registered = runs.c.name.in_(bindparam("p_names", expanding=True))
        # The transaction's start time, not clock_timestamp(): a stable value is an index
        # condition, so a sweep reads only the due entries of ix_runs_due, not every
        # waiting run's (100,000 timers over a day cost one short index range).
        self._due_by = self.dialect.stable_now
        self._due_runs()
        self._wake()
        self._dispatchers()
        # A run's message that a worker without the workflow discarded (Celery's unknown
        # task) counts as a dispatch no worker claimed; its due time stays, so workers
        # without it never pass it round in a loop.
        self.count_discarded_run = (
            update(runs)
            .where(
                self.ns,
                runs.c.id == bindparam("p_run_id"),
                runs.c.name == bindparam("p_name"),
                runs.c.status == "PENDING",
            )
            .values(dispatches=runs.c.dispatches + 1, updated_at=self.now)
        )
        # At a worker's start: the PENDING runs of its workflows that were published and
        # not claimed (a worker without the workflow discarded them, or their publish was
        # lost) are due now, for its first sweep, instead of after their backoff.
        self.make_unclaimed_runs_due = (
            update(runs)
            .where(
                self.ns,
                runs.c.status == "PENDING",
                runs.c.name.in_(bindparam("p_names", expanding=True)),
                runs.c.dispatches > 0,
                runs.c.due_at > self.now,
            )
            .values(due_at=self.now, updated_at=self.now)
        )

    def _due_runs(self) -> None:
        """What is due: expired leases, lost publishes, backoffs and timers that passed."""
        runs, now = self.tables.runs, self.now
        registered, due_by = self._registered, self._due_by
        # An expired lease, or one whose owner died: the worker was lost.
        lost = runs.c.status == "RUNNING"
        lease_window: Any = bindparam("p_lease_window", type_=Float)
        lease_window_end = due_by + lease_window
        due = (
            select(runs.c.id)
            .where(
                self.ns,
                registered,
                runs.c.due_at.isnot(None),
                # Due, or a lease (due within p_lease_window) whose owner died: one range
                # of ix_runs_due either way. The sweeper names the owners it saw gone twice
                # (engine/liveness.py); none, and the window is 0.
                runs.c.due_at <= lease_window_end,
                or_(
                    runs.c.due_at <= due_by,
                    and_(
                        lost,
                        runs.c.owner.in_(bindparam("p_gone_owners", expanding=True)),
                        self.owner_is_gone(lease_window),
                    ),
                ),
                self.dispatched_here(runs.c.due_at, due_by),
            )
            .order_by(runs.c.due_at)
            .limit(bindparam("p_limit"))
        )
        # Not the run's fault, so the attempt is given back; the recoveries budget
        # (durable_max_recoveries) stops a poison run.
        exhausted = and_(lost, runs.c.recoveries + 1 >= bindparam("p_max_recoveries"))
        # Published durable_max_dispatches times since its last claim, and no worker took
        # it: its message is refused by (or kills) every worker, or none consumes its queue.
        unclaimed = and_(
            runs.c.status == "PENDING", runs.c.dispatches >= bindparam("p_max_dispatches")
        )
        # A cancelled saga is published (it rolls back), not ended here.
        cancelled = and_(runs.c.cancel_requested == true(), runs.c.compensable == false())
        finished = or_(cancelled, exhausted, unclaimed)
        backoff = case(
            (runs.c.dispatches >= 6, 64), else_=literal_column("1").op("<<")(runs.c.dispatches)
        )
        if self.dialect.locks_rows:
            # A materialised CTE locks exactly the rows it returns; an IN (subquery) may be
            # rescanned and lock rows that the UPDATE then leaves alone.
            due_runs = due.with_for_update(skip_locked=True).cte("due_runs")
            due_runs = due_runs.prefix_with("MATERIALIZED")
            picked = runs.c.id == due_runs.c.id
        else:
            picked = runs.c.id.in_(due.scalar_subquery())
        self.sweep_due_runs = (
            update(runs)
            .where(self.ns, picked)
            .values(
                status=case(
                    (cancelled, "CANCELLED"), (or_(exhausted, unclaimed), "FAILED"), else_="PENDING"
                ),
                error=case(
                    (cancelled, runs.c.error),
                    (exhausted, bindparam("p_lost_error")),
                    (unclaimed, bindparam("p_unclaimed_error")),
                    else_=runs.c.error,
                ),
                finished_at=case((finished, now), else_=None),
                owner=None,
                wait_signal=None,
                wait_items=False,
                attempts=runs.c.attempts - case((and_(lost, ~finished), 1), else_=0),
                recoveries=runs.c.recoveries + case((lost, 1), else_=0),
                due_at=case((finished, None), else_=now + bindparam("p_grace") * backoff),
                dispatches=runs.c.dispatches + 1,
                updated_at=now,
                # No worker settled it to report it: due for the sweeper's report at once.
                outbox_at=self.outbox_entry(finished, now - bindparam("p_grace")),
            )
            .returning(*self._due_columns)
        )

    def _wake(self) -> None:
        """Wake a waiting run: its signal came, or its wake-up was lost."""
        runs, signals, now = self.tables.runs, self.tables.signals, self.now
        namespace, registered = self.namespace, self._registered
        # Callers add which runs.
        wake = self.wake_waiting()
        self.wake_run = wake.where(
            runs.c.id == bindparam("p_run_id"), runs.c.wait_signal == bindparam("p_signal")
        )
        # Only a wake-up lost for a dispatch grace: the signal's own wake-up message comes
        # first, so the resumed run links back to the signal's sender (tracing).
        signalled = select(signals.c.run_id).where(
            signals.c.namespace == namespace,
            signals.c.consumed_at.is_(None),
            signals.c.run_id == runs.c.id,
            signals.c.name == runs.c.wait_signal,
            self.dispatched_here(signals.c.created_at, now - bindparam("p_grace")),
            signals.c.created_at <= now - bindparam("p_grace"),
        )
        # Driven from the few pending signals (their partial index), not from every
        # waiting run: 100,000 runs waiting on timers must not cost the sweeper a scan.
        pending_for = select(signals.c.run_id).where(
            signals.c.namespace == namespace,
            signals.c.consumed_at.is_(None),
            signals.c.created_at <= now - bindparam("p_grace"),
        )
        self.wake_signalled_runs = wake.where(
            registered,
            runs.c.wait_signal.isnot(None),
            runs.c.id.in_(pending_for),
            exists(signalled),
        )

    def _dispatchers(self) -> None:
        """The other brokers seen on the namespace."""
        runs, dispatcher, due_by = self.tables.runs, self.dispatcher, self._due_by
        # The other brokers whose runs are in the namespace: active ones, or finished ones
        # created within p_window seconds (read once, as a worker starts). Each branch is a
        # range of a partial index (due_by: a stable value), the due runs' or the settled
        # runs' by status.
        other = and_(
            self.ns, runs.c.dispatcher.isnot(None), runs.c.dispatcher != (dispatcher or "")
        )
        recent = runs.c.created_at >= due_by - bindparam("p_window", type_=Float)
        finished = runs.c.status.in_([status_literal(s) for s in FINISHED_STATUSES])
        seen = union(
            select(runs.c.dispatcher).where(other, runs.c.due_at.isnot(None)),
            select(runs.c.dispatcher).where(
                other, settled(runs), runs.c.status == status_literal("WAITING")
            ),
            select(runs.c.dispatcher).where(other, settled(runs), finished, recent),
        ).subquery()
        self.other_dispatchers = (
            select(seen.c.dispatcher).order_by(seen.c.dispatcher).limit(bindparam("p_limit"))
        )
