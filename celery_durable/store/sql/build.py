"""Building blocks of the statements: parameters, the database clock, the fencing guard.

Example::

    class MyStatements(Builder):
        def __init__(self, tables, dialect, namespace):
            super().__init__(tables, dialect, namespace)
            self.touch = update(tables.runs).where(self.fenced).values(updated_at=self.now)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    Float,
    and_,
    bindparam,
    case,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueRun, Outcome, StepRecord
from celery_durable.store.schema import Tables

# Seconds past due after which a run of another broker is any sweeper's to dispatch
# (``Builder.dispatched_here``; the sweeper passes max(this, 10 dispatch graces)).
TAKEOVER = 600.0


def params(**values: Any) -> dict[str, Any]:
    """Statement parameters, with the bind-name prefix."""
    return {f"p_{key}": value for key, value in values.items()}


def run_params(run: Any) -> dict[str, Any]:
    """The parameters of ``insert_run`` for a ``NewRun``."""
    return params(
        id=run.id,
        name=run.name,
        queue=run.queue,
        args=run.args,
        max_attempts=run.max_attempts,
        retry_backoff=run.retry_backoff,
        grace=run.dispatch_grace,
        start_delay=run.start_delay,
        canvas=run.canvas,
        priority=run.priority or None,
        dedup_key=run.dedup_key,
        timeout=run.timeout,
    )


def began_ago(step: StepRecord, now: float) -> float:
    """Seconds from when ``step`` began to ``now`` (``time.monotonic()`` in this process):
    the row's ``started_at`` is the database's clock minus it. 0 for a record that says
    nothing of when it began (a wait or a marker begins now)."""
    return 0.0 if step.began is None else max(0.0, now - step.began)


def step_params(run_id: str, fence: int, step: StepRecord) -> dict[str, Any]:
    """The parameters of ``record_step`` for ``step`` of the run (under its fence); ``ago``
    (``began_ago``) is taken now, just before the write."""
    return params(
        run_id=run_id,
        fence=fence,
        idx=step.idx,
        name=step.name,
        status=step.status,
        input=step.input,
        output=step.output,
        error=step.error,
        duration=step.duration,
        ago=began_ago(step, time.monotonic()),
    )


def write_carried(
    conn: Any, record_step: Any, run_id: str, fence: int, carried: Sequence[StepRecord]
) -> None:
    """Write deferred steps' records (``carried``) in the caller's transaction, after the
    caller checked that it holds the run: they commit with its write, or not at all."""
    for step in carried:
        conn.execute(record_step, step_params(run_id, fence, step))


def hold_run(
    conn: Any, steps: Any, run_id: str, fence: int, carried: Sequence[StepRecord]
) -> Outcome | None:
    """Lock the run's row (FOR UPDATE on Postgres) while the caller holds its lease, then
    write ``carried`` in the caller's transaction. None: held; otherwise LEASE_LOST or
    CANCELLED, and nothing is written. ``steps``: the step statements (``check_live_locked``,
    ``record_step``)."""
    live = conn.execute(steps.check_live_locked, params(run_id=run_id, fence=fence)).first()
    if live is None:
        return Outcome.LEASE_LOST
    if live.cancel_requested:
        return Outcome.CANCELLED
    write_carried(conn, steps.record_step, run_id, fence, carried)
    return None


def columns_of(table: Any, record: type, **computed: Any) -> tuple[Any, ...]:
    """The columns that fill ``record``, in its field order (rows unpack into it);
    ``computed`` gives an expression for a field that is not a column of ``table``. Fields
    marked ``metadata={"stored": False}`` (last, with a default) are left out."""
    return tuple(
        computed[field.name].label(field.name) if field.name in computed else table.c[field.name]
        for field in dataclasses.fields(record)
        if field.metadata.get("stored", True)
    )


# The end of the owner id of a process that holds a proof of life (``store/liveness.py``):
# only its leases are taken over when no session holds its lock. Other owners (older
# workers, SQLite, PgBouncer without listen_url) keep the lease.
PROOF_OF_LIFE = ":live"


def proof_of_life_key(owner: Any) -> Any:
    """The advisory lock key (bigint) of an owner id: 64 bits, so two live owners' keys
    never meet in practice (and if they did, a dead one would keep its lease: no harm)."""
    return func.hashtextextended(owner, 0)


class Builder:
    """What every area's statements share: the dialect, the clock and the fencing guard.

    ``dispatcher``: the broker of the store's app (``apps.broker_identity``), written on
    the runs it starts and claims; its sweeps take only those (``dispatched_here``). None
    (a store without an app): nothing written, every run taken."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        self.tables = tables
        self.dialect = dialect
        self.namespace = namespace
        self.dispatcher = dispatcher
        runs = tables.runs
        self.now: Any = dialect.now
        self.ns = runs.c.namespace == namespace
        self.run_is = and_(self.ns, runs.c.id == bindparam("p_run_id"))
        # The caller holds the run: same fencing token, still running.
        self.fenced = and_(
            self.run_is, runs.c.fence == bindparam("p_fence"), runs.c.status == "RUNNING"
        )
        self.live = and_(self.fenced, runs.c.cancel_requested == false())
        self.run_attempt = select(runs.c.attempts).where(self.run_is).scalar_subquery()

    def here(self, dispatcher: Any) -> Any:
        """A run whose ``dispatcher`` column says this store's sweeper dispatches it: its
        own broker's, or one written before migration 0007 (NULL)."""
        if self.dispatcher is None:
            return true()
        return or_(dispatcher.is_(None), dispatcher == self.dispatcher)

    def dispatched_here(self, due_at: Any, due_by: Any) -> Any:
        """What the sweeper may take, of rows due at ``due_at``: a run of its broker
        (``here``), or one that no sweeper of its own broker took for ``p_takeover``
        seconds past due (that broker's workers are gone: a deployment that moved broker
        must not strand its runs)."""
        if self.dispatcher is None:
            return true()
        runs = self.tables.runs
        overdue = due_at <= due_by - bindparam("p_takeover", type_=Float)
        return or_(self.here(runs.c.dispatcher), overdue)

    def owner_is_gone(self, lease: Any, owner: Any = None) -> Any:
        """The run's lease ``owner`` (default: the runs row's) declared a proof of life
        and no session holds it: the process died, or its connection did (the claimant
        tells these apart: ``engine/liveness.py``).

        Trying the lock, not reading pg_locks: no copy of the lock table per row, and a
        lock the owner holds is refused. The transaction-level lock ends with the
        claimant's statement. Never true where sessions hold no locks (SQLite).

        A server restart ends every session, live owners' too, and they take their locks
        again only at their next beat: until the server has been up for ``lease`` (the
        longest a live owner goes without a beat), a missing lock proves nothing, and the
        lease decides, as without a proof of life."""
        if not self.dialect.session_locks:
            return false()
        if owner is None:
            owner = self.tables.runs.c.owner
        started: Any = literal_column(
            "CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) AS DOUBLE PRECISION)"
        )
        return and_(
            owner.like(f"%{PROOF_OF_LIFE}"),
            started < self.now - lease,
            func.pg_try_advisory_xact_lock(proof_of_life_key(owner)),
        )

    def outbox_entry(self, finishes: Any, at: Any = None) -> Any:
        """``outbox_at`` for a statement that ``finishes`` a run: a run with a canvas owes
        Celery a report from then (``at``, default now); others keep theirs."""
        runs = self.tables.runs
        owes = and_(finishes, runs.c.canvas.isnot(None))
        return case((owes, self.now if at is None else at), else_=runs.c.outbox_at)

    def step_row(self) -> dict[str, Any]:
        """The values of a step row written from ``step_params`` (record_step's)."""
        return {
            "namespace": literal(self.namespace),
            "run_id": bindparam("p_run_id"),
            "idx": bindparam("p_idx"),
            "name": bindparam("p_name"),
            "status": bindparam("p_status"),
            "input": bindparam("p_input"),
            "output": bindparam("p_output"),
            "error": bindparam("p_error"),
            "created_at": self.now,
            "duration": bindparam("p_duration", type_=Float),
            "started_at": self.now - bindparam("p_ago", type_=Float),
            # The run's attempt counter under the writer's fence (a fenced write is this
            # claim's); fenced_upsert takes it from the run row it already locks.
            "attempt": self.run_attempt,
        }

    def step_resumed(self, excluded: Any) -> dict[str, Any]:
        """``record_step``'s columns computed on conflict, from the stored row and the new.

        A wait's row is written "waiting" when the run suspends and "ok" when it resumes:
        its duration is the time between the two, on the database's clock. A wait or a
        fan-out step ("started") that ends keeps when, and in which attempt, it began; a
        failed step that runs again takes the new run's."""
        steps = self.tables.steps
        resumed = and_(steps.c.status == "waiting", excluded.status == "ok")
        began = or_(steps.c.status == "waiting", steps.c.status == "started")
        return {
            "duration": case(
                (resumed, excluded.created_at - steps.c.created_at), else_=excluded.duration
            ),
            "started_at": case(
                (began, func.coalesce(steps.c.started_at, steps.c.created_at)),
                else_=excluded.started_at,
            ),
            "attempt": case(
                (began, func.coalesce(steps.c.attempt, excluded.attempt)),
                else_=excluded.attempt,
            ),
        }

    def suspend_waiting(self) -> Any:
        """Release the run the caller holds (``p_fence``) as WAITING for ``p_signal`` (a
        signal's name, or what a wing's wait names) until ``p_wake_at`` (None: no timer);
        its attempt given back, its dispatches counted afresh."""
        runs = self.tables.runs
        return (
            update(runs)
            .where(self.run_is, runs.c.fence == bindparam("p_fence"))
            .values(
                status="WAITING",
                owner=None,
                wait_signal=bindparam("p_signal"),
                due_at=bindparam("p_wake_at", type_=Float),
                attempts=runs.c.attempts - 1,
                dispatches=0,
                updated_at=self.now,
            )
        )

    def wake_waiting(self, *where: Any, **also: Any) -> Any:
        """Wake the WAITING runs that also match ``where`` (setting ``also`` too), returning
        what the caller publishes. Due after ``p_grace``, so that the sweeper sends a publish
        that is lost; only a WAITING run, so that a wake-up is idempotent."""
        runs, now = self.tables.runs, self.now
        return (
            update(runs)
            .where(self.ns, runs.c.status == "WAITING", *where)
            .values(
                status="PENDING",
                wait_signal=None,
                ready_at=None,
                due_at=now + bindparam("p_grace"),
                dispatches=0,
                updated_at=now,
                **also,
            )
            .returning(*columns_of(runs, DueRun))
        )

    def insert(self, table: Any) -> Any:
        return self.dialect.insert(table)

    def with_notify(self, stmt: Any, *columns: str) -> Any:
        """On Postgres, wake handle waiters from the same statement (no extra round trip)."""
        if not self.dialect.notifies:
            return stmt
        changed = stmt.cte("changed")
        channel = f"{self.tables.runs.name.removesuffix('runs')}events"
        return select(
            *(changed.c[name] for name in columns),
            func.pg_notify(channel, literal(self.namespace + ":").concat(changed.c.id)),
        ).select_from(changed)

    def notify(self, run_id: str) -> Any:
        channel = f"{self.tables.runs.name.removesuffix('runs')}events"
        return select(func.pg_notify(channel, f"{self.namespace}:{run_id}"))

    def fenced_upsert(
        self,
        table: Any,
        values: dict[str, Any],
        *,
        conflict: list[Any],
        updates: Sequence[str],
        where: Any = None,
        computed: Callable[[Any], dict[str, Any]] | None = None,
        guard: Any = None,
    ) -> Any:
        """INSERT ... ON CONFLICT DO UPDATE, only while the caller holds the run's lease.

        On Postgres the fencing check is part of the statement: FOR SHARE on the run row
        serialises the write with a concurrent claim. SQLite checks ``check_live`` first
        in the same (BEGIN IMMEDIATE) transaction. ``computed(excluded)``: more columns to
        set on conflict, as expressions of the stored row and ``excluded``. ``guard``: the
        run's condition instead of ``live`` (a rollback writes after cancel: ``fenced``).
        """
        ins: Any
        if self.dialect.locks_rows:
            runs = self.tables.runs
            live_run = (
                select(runs.c.id, runs.c.attempts)
                .where(self.live if guard is None else guard)
                .with_for_update(read=True)
                .cte("live_run")
            )
            # The run's attempt from the row the CTE read, not a second lookup.
            taken = {"attempt": live_run.c.attempts} if "attempt" in values else {}
            ins = self.dialect.insert(table).from_select(
                list(values), select(*{**values, **taken}.values()).select_from(live_run)
            )
        else:
            ins = self.dialect.insert(table).values(values)
        set_ = {name: ins.excluded[name] for name in updates}
        if computed is not None:
            set_.update(computed(ins.excluded))
        return ins.on_conflict_do_update(index_elements=conflict, set_=set_, where=where)
