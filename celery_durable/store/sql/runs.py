"""The statements of a run: start, claim, settle, retry, release, cancel and read it.

Example::

    sql = RunStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.claim_run       # UPDATE ... RETURNING fence, attempts, ...
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

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import RunRecord
from celery_durable.store.schema import ACTIVE_STATUSES, Tables
from celery_durable.store.sql.build import Builder, columns_of


class RunStatements(Builder):
    """Start, claim, settle, retry, release and read a run."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        self._start()
        self._dedup()
        self._deadlines()
        self._claim()
        self._settle()
        self._leases()
        self._cancel()
        self._reads()

    def _start(self) -> None:
        """Insert a run, or a child run in its parent's dispatch transaction."""
        runs, now = self.tables.runs, self.now
        namespace, dispatcher = self.namespace, self.dispatcher
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
            "canvas": bindparam("p_canvas"),
            "priority": bindparam("p_priority"),
            "dedup_key": bindparam("p_dedup_key"),
            "deadline_at": now + bindparam("p_timeout", type_=Float),
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

    def _dedup(self) -> None:
        """The active run of a dedup key; a debounced start that moves and replaces it."""
        runs, now = self.tables.runs, self.now
        self.find_active_dedup = select(runs.c.id, runs.c.status).where(
            self.ns,
            runs.c.name == bindparam("p_name"),
            runs.c.dedup_key == bindparam("p_dedup_key"),
            # Equalities, not IN: the hot path's statements are compiled once, without
            # SQLAlchemy's expanding parameters.
            or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
        )
        # Not started yet: its start moves to ``delay`` from now (no later than
        # ``max_wait`` after its first call) and it takes this call's arguments.
        later = now + bindparam("p_delay", type_=Float)
        capped = func.coalesce(runs.c.created_at + bindparam("p_max_wait", type_=Float), later)
        start = case((capped < later, capped), else_=later)
        self.debounce_run = (
            update(runs)
            .where(self.run_is, runs.c.status == "PENDING", runs.c.started_at.is_(None))
            .values(args=bindparam("p_args"), ready_at=start, due_at=start, updated_at=now)
            .returning(runs.c.id)
        )

    def _deadlines(self) -> None:
        """The active runs past their deadline, not yet told to stop."""
        runs = self.tables.runs
        self.overdue_runs = (
            select(runs.c.id)
            .where(
                self.ns,
                runs.c.deadline_at.isnot(None),
                runs.c.deadline_at <= self.dialect.stable_now,
                runs.c.status.in_(ACTIVE_STATUSES),
                runs.c.cancel_requested == false(),
            )
            .order_by(runs.c.deadline_at)
            .limit(bindparam("p_limit"))
        )

    def _claim(self) -> None:
        """Take a pending run, or a running one whose lease expired (``claim_run``) or
        whose owner, named by the claimant, died (``take_over_run``)."""
        runs = self.tables.runs
        self.claim_run = self._claim_when(runs.c.due_at < self.now)
        # Tried only while the lease lasts, on an owner the claimant saw gone twice.
        gone = and_(
            runs.c.owner == bindparam("p_gone_owner"), self.owner_is_gone(bindparam("p_lease"))
        )
        self.take_over_run = self._claim_when(gone)

    def _claim_when(self, taken_over: Any) -> Any:
        """The claim of a pending run, or of a running one where ``taken_over`` holds."""
        runs, steps, now = self.tables.runs, self.tables.steps, self.now
        namespace, dispatcher = self.namespace, self.dispatcher
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
                    runs.c.recoveries + 1 < bindparam("p_max_recoveries"),
                    taken_over,
                ),
            ),
        )
        # Taking over an expired lease recovers a lost worker: not a new attempt.
        lost = runs.c.status == "RUNNING"
        # A fencing token that grows and is never handed out twice, even when a claim is
        # lost in a database crash (claims commit asynchronously): the database clock in
        # microseconds, or the old token + 1 if that is larger.
        micros = cast(now * 1_000_000, BigInteger)
        next_fence = self.dialect.greatest(runs.c.fence + 1, micros)
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
                dispatches=0,  # durable_max_dispatches counts the publishes since a claim
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
        if self.dialect.round_trips:
            has_steps: Any = exists().where(
                steps.c.namespace == namespace, steps.c.run_id == runs.c.id
            )
        else:
            has_steps = literal(True)  # SQLite: one more read costs nothing
        return claim.returning(
            *returning,
            has_steps.label("has_steps"),
            runs.c.cancel_requested,
            runs.c.compensable,
            runs.c.canvas,
            func.coalesce(runs.c.priority, 0).label("priority"),
            runs.c.deadline_at,
            runs.c.recoveries,
        )

    def _settle(self) -> None:
        """End the run, or put it back for a retry."""
        runs, now = self.tables.runs, self.now
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
                # The settling worker reports it; the sweeper, if it is still owed after
                # the grace.
                outbox_at=self.outbox_entry(true()),
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
                outbox_at=self.outbox_entry(cancelled),
            )
            .returning(runs.c.id, runs.c.status)
        )

    def _leases(self) -> None:
        """Give leases back, renew them."""
        runs, now = self.tables.runs, self.now
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
        # Says which of them were asked to cancel: an async body is interrupted at its await.
        self.renew_leases = (
            update(runs)
            .where(owned)
            .values(due_at=now + bindparam("p_lease"))
            .returning(runs.c.id, runs.c.cancel_requested)
        )
        self.renew_lease = (
            update(runs)
            .where(self.live)
            .values(due_at=now + bindparam("p_lease"))
            .returning(runs.c.id)
        )

    def _cancel(self) -> None:
        """Request cancellation; hand a run whose first publish failed to any sweeper."""
        runs, now = self.tables.runs, self.now
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
                # The canceller reports it at once; the sweeper, if that is lost.
                outbox_at=self.outbox_entry(idle),
            )
            .returning(runs.c.status)
        )

        # A run whose first publish failed: any broker's sweeper may publish it.
        self.disown_run = (
            update(runs)
            .where(self.run_is, runs.c.status == "PENDING", runs.c.started_at.is_(None))
            .values(dispatcher=None)
        )

    def _reads(self) -> None:
        """Read a run, its status, the database clock."""
        runs, now = self.tables.runs, self.now
        self.get_run = select(*columns_of(runs, RunRecord)).where(self.run_is)
        self.get_status = select(runs.c.status).where(self.run_is)
        self.now_value = select(now)
