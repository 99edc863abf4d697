"""The statements of the operations commands: list, stats, show, resume, fork, gc.

None of these is on the hot path. They are written for tables of millions of finished runs:
every read goes through an index (``schema.settled_indexes`` for waiting and finished
runs, the sweeper's ``ix_<prefix>runs_due`` for pending and running ones, which always
carry ``due_at``), and a page is found by its keyset, never by OFFSET.

Statuses are written into the SQL as literals (they come from a fixed set): a partial
index is only usable when the planner can prove its predicate from the query, which
neither a generic Postgres plan nor SQLite can do for a bound parameter.

Example::

    sql = AdminStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    page = sql.list_runs(RunFilter(statuses=("FAILED",), workflow="shop.checkout"))
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    String,
    and_,
    bindparam,
    cast,
    delete,
    false,
    func,
    insert,
    literal,
    literal_column,
    null,
    or_,
    select,
    true,
    tuple_,
    union_all,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.operation_records import (
    OldestRun,
    PendingSignal,
    RunFilter,
    RunSummary,
    StateKey,
)
from celery_durable.store.records import DueRun
from celery_durable.store.schema import (
    ACTIVE_STATUSES,
    DUE_STATUSES,
    FINISHED_STATUSES,
    SETTLED_STATUSES,
    Tables,
)
from celery_durable.store.sql.build import Builder, columns_of

ALL_STATUSES = (*ACTIVE_STATUSES, *FINISHED_STATUSES)


def status_literal(status: str) -> Any:
    """A status as an SQL literal; only the six known statuses are accepted."""
    if status not in ALL_STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    return literal_column(f"'{status}'")


def settled(table: Any) -> Any:
    """The predicate of the settled-run indexes, written exactly as they were created."""
    return table.c.status.in_([status_literal(s) for s in SETTLED_STATUSES])


class AdminStatements(Builder):
    """List and count runs."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        runs, now = tables.runs, self.now
        self._summary_columns = columns_of(runs, RunSummary)
        due = runs.c.due_at.isnot(None)
        oldest = select(*columns_of(runs, OldestRun)).order_by(runs.c.created_at, runs.c.id)
        ready = or_(runs.c.ready_at.is_(None), runs.c.ready_at <= now)
        self.run_stats_oldest_pending = oldest.where(
            self.ns, due, runs.c.status == status_literal("PENDING"), ready
        ).limit(1)
        self.run_stats_oldest_waiting = oldest.where(
            self.ns, settled(runs), runs.c.status == status_literal("WAITING")
        ).limit(1)
        self.run_stats_due = select(func.count(), func.min(runs.c.due_at)).where(
            self.ns, due, runs.c.due_at <= now
        )
        self.run_stats_now = select(now)
        self.run_stats_counts = self._counts()

        signals, state = tables.signals, tables.state
        self.pending_signals = (
            select(*columns_of(signals, PendingSignal))
            .where(
                signals.c.namespace == namespace,
                signals.c.run_id == bindparam("p_run_id"),
                signals.c.consumed_at.is_(None),
            )
            .order_by(signals.c.id)
        )
        self.state_keys = (
            select(*columns_of(state, StateKey))
            .where(state.c.namespace == namespace, state.c.run_id == bindparam("p_run_id"))
            .order_by(state.c.key)
        )
        self._resume()
        self._fork()
        self._gc()

    def _resume(self) -> None:
        runs, steps, now = self.tables.runs, self.tables.steps, self.now
        # The run row is locked for the whole resume: a concurrent resume, gc or fork waits.
        lock = select(runs.c.status, runs.c.attempts, runs.c.error).where(self.run_is)
        self.resume_run_lock = self.dialect.for_update(lock)
        of_run = and_(steps.c.namespace == self.namespace, steps.c.run_id == bindparam("p_run_id"))
        self.resume_run_steps = (
            select(steps.c.idx, steps.c.status).where(of_run).order_by(steps.c.idx)
        )
        # Only a failure is dropped: an "ok" step is never recorded again.
        self.resume_run_drop_step = delete(steps).where(
            of_run, steps.c.idx == bindparam("p_idx"), steps.c.status == "error"
        )
        resumable = runs.c.status.in_([status_literal(s) for s in ("FAILED", "CANCELLED")])
        # PENDING and due like a fresh start: the sweeper publishes it again if the publish
        # that follows is lost; the claim decides who runs it, as for every run.
        self.resume_run = (
            update(runs)
            .where(self.run_is, resumable)
            .values(
                status="PENDING",
                attempts=0,
                recoveries=0,
                dispatches=0,
                owner=None,
                result=None,
                error=None,
                cancel_requested=False,
                cancel_reason=None,
                wait_signal=None,
                ready_at=None,
                finished_at=None,
                due_at=now + bindparam("p_grace"),
                updated_at=now,
                # A new deadline (resume --timeout), or none: the old one has passed.
                deadline_at=now + bindparam("p_timeout", type_=Float),
            )
            .returning(*columns_of(runs, DueRun))
        )

    def _counts(self) -> Any:
        """Runs by workflow and status, with the recoveries of pending and running runs."""
        runs = self.tables.runs
        active = runs.c.status.in_([status_literal(s) for s in DUE_STATUSES])
        due_counts = (
            select(runs.c.name, runs.c.status, func.count(), func.sum(runs.c.recoveries))
            .where(self.ns, runs.c.due_at.isnot(None), active)
            .group_by(runs.c.name, runs.c.status)
        )
        return union_all(self._settled_counts(), due_counts)

    def _settled_counts(self) -> Any:
        runs = self.tables.runs
        if not self.dialect.writes_in_ctes:  # SQLite: a GROUP BY over the covering counts index
            return (
                select(runs.c.name, runs.c.status, func.count(), cast(null(), Integer))
                .where(self.ns, settled(runs))
                .group_by(runs.c.name, runs.c.status)
            )
        # Postgres: GROUP BY over a million index entries compares two strings per entry
        # (about 150 ms); instead, walk the distinct (name, status) pairs of the counts
        # index (a loose index scan: one probe per pair) and count each pair's entries
        # on their own, which is a plain index-only count (about 50 ms for a million).
        probe = runs.alias("probe")
        groups = (
            select(runs.c.name, runs.c.status)
            .where(self.ns, settled(runs))
            .order_by(runs.c.name, runs.c.status)
            .limit(1)
            .cte("run_groups", recursive=True)
        )
        following = (
            select(probe.c.name, probe.c.status)
            .where(
                probe.c.namespace == self.namespace,
                settled(probe),
                tuple_(probe.c.name, probe.c.status) > tuple_(groups.c.name, groups.c.status),
            )
            .order_by(probe.c.name, probe.c.status)
            .limit(1)
            .lateral("following")
        )
        groups = groups.union_all(
            select(following.c.name, following.c.status).select_from(groups.join(following, true()))
        )
        counted = runs.alias("counted")
        count = (
            select(func.count())
            .where(
                counted.c.namespace == self.namespace,
                settled(counted),
                counted.c.name == groups.c.name,
                counted.c.status == groups.c.status,
            )
            .scalar_subquery()
        )
        return select(groups.c.name, groups.c.status, count, cast(null(), Integer)).select_from(
            groups
        )

    def list_runs(self, run_filter: RunFilter) -> Any:
        """One page of runs, newest first (``p_limit`` rows at most).

        One branch per status, each an ordered index range that stops after ``p_limit``
        rows, merged by created_at: a page costs ``p_limit`` index entries per status,
        however many runs the tables hold.
        """
        runs = self.tables.runs
        branches = []
        for status in run_filter.statuses or ALL_STATUSES:
            where = [self.ns, runs.c.status == status_literal(status)]
            # Settled runs are in the settled indexes; pending and running ones carry
            # due_at, so the sweeper's index finds them.
            where.append(settled(runs) if status in SETTLED_STATUSES else runs.c.due_at.isnot(None))
            where.extend(self._filter_terms(run_filter))
            branches.append(
                select(*self._summary_columns)
                .where(*where)
                .order_by(runs.c.created_at.desc(), runs.c.id.desc())
                .limit(bindparam("p_limit"))
            )
        if len(branches) == 1:
            return branches[0]
        # SQLite takes ORDER BY/LIMIT in a compound member only inside a subquery.
        merged = union_all(*(select(*b.subquery().c) for b in branches)).subquery("page")
        return (
            select(*merged.c)
            .order_by(merged.c.created_at.desc(), merged.c.id.desc())
            .limit(bindparam("p_limit"))
        )

    def _filter_terms(self, run_filter: RunFilter) -> list[Any]:
        runs = self.tables.runs
        terms: list[Any] = []
        if run_filter.workflow is not None:
            terms.append(runs.c.name == bindparam("p_workflow"))
        if run_filter.since is not None:
            terms.append(runs.c.created_at >= bindparam("p_since"))
        if run_filter.until is not None:
            terms.append(runs.c.created_at < bindparam("p_until"))
        if run_filter.after is not None:
            created: Any = bindparam("p_after_created")
            run_id: Any = bindparam("p_after_id")
            # The first term bounds the index range; the second breaks ties on created_at.
            terms.append(runs.c.created_at <= created)
            terms.append(
                or_(
                    runs.c.created_at < created,
                    and_(runs.c.created_at == created, runs.c.id < run_id),
                )
            )
        return terms

    def _fork(self) -> None:
        runs, steps, signals = self.tables.runs, self.tables.steps, self.tables.signals
        now = self.now
        # FOR SHARE: the origin can't be resumed, collected or changed while it is copied.
        origin = select(runs.c.status, runs.c.error).where(self.run_is)
        self.fork_run_lock = self.dialect.for_update(origin, read=True)
        self.fork_run_steps = self.resume_run_steps
        new_id = bindparam("p_new_id", type_=String)
        # The new run starts like any run: PENDING, due after the dispatch grace.
        started = {
            "namespace": literal(self.namespace, String),
            "id": new_id,
            "name": runs.c.name,
            "status": literal("PENDING", String),
            "queue": runs.c.queue,
            "args": runs.c.args,
            "attempts": literal(0, Integer),
            "max_attempts": runs.c.max_attempts,
            "recoveries": literal(0, Integer),
            "retry_backoff": runs.c.retry_backoff,
            "fence": literal(0, Integer),
            "due_at": now + bindparam("p_grace", type_=Float),
            "dispatches": literal(0, Integer),
            "cancel_requested": false(),
            "created_at": now,
            "updated_at": now,
            "forked_from": runs.c.id,
            "forked_from_step": bindparam("p_from_step", type_=Integer),
            "deadline_at": now + bindparam("p_timeout", type_=Float),
            # Started by this app: its broker's sweepers dispatch it.
            "dispatcher": (
                runs.c.dispatcher if self.dispatcher is None else literal(self.dispatcher, String)
            ),
        }
        self.fork_run = (
            self.insert(runs)
            .from_select(list(started), select(*started.values()).where(self.run_is))
            .on_conflict_do_nothing()
            .returning(*columns_of(runs, DueRun))
        )
        copied = [c.name for c in steps.c]
        of_origin = and_(
            steps.c.namespace == self.namespace, steps.c.run_id == bindparam("p_run_id")
        )
        self.fork_run_copy_steps = insert(steps).from_select(
            copied,
            select(*(new_id if name == "run_id" else steps.c[name] for name in copied)).where(
                of_origin, steps.c.idx < bindparam("p_from_step", type_=Integer)
            ),
        )
        # The origin's unconsumed signals go with the fork, in the order sent and with their
        # idempotency keys (a resend to the fork is then a no-op); the origin keeps its own.
        carried = ["namespace", "run_id", "name", "payload", "idempotency_key", "created_at"]
        self.fork_run_copy_signals = (
            insert(signals)
            .from_select(
                carried,
                select(*(new_id if name == "run_id" else signals.c[name] for name in carried))
                .where(
                    signals.c.namespace == self.namespace,
                    signals.c.run_id == bindparam("p_run_id"),
                    signals.c.consumed_at.is_(None),
                )
                .order_by(signals.c.id),
            )
            .returning(signals.c.name)
        )

    def _gc(self) -> None:
        """Per finished status: each is one ordered range of ``ix_<prefix>runs_status``."""
        self.gc_runs: dict[str, Any] = {}
        self.gc_runs_pick: dict[str, Any] = {}
        self.count_collectable: dict[str, Any] = {}
        for status in FINISHED_STATUSES:
            old = self._collectable(status)
            self.count_collectable[status] = self._count_collectable(old)
            if self.dialect.writes_in_ctes:
                self.gc_runs[status] = self._gc_in_one_statement(old)
            else:
                self.gc_runs_pick[status] = old.limit(bindparam("p_batch"))
        # SQLite deletes a picked batch table by table, in the same transaction.
        ids: Any = bindparam("p_ids", expanding=True)
        self.gc_runs_delete = {
            name: delete(table).where(table.c.namespace == self.namespace, table.c.run_id.in_(ids))
            for name, table in self._run_rows().items()
        }
        runs = self.tables.runs
        finished = runs.c.status.in_([status_literal(s) for s in FINISHED_STATUSES])
        self.gc_runs_delete["runs"] = delete(runs).where(self.ns, runs.c.id.in_(ids), finished)

    def _run_rows(self) -> dict[str, Any]:
        """The tables whose rows belong to a run, by their name in ``Collected``."""
        return {
            "steps": self.tables.steps,
            "signals": self.tables.signals,
            "state": self.tables.state,
            "items": self.tables.items,  # a fan-out's items go with their run
            "actions": self.tables.actions,  # what operators did to it
            "streams": self.tables.streams,  # the streams it wrote, and their values
            "stream_values": self.tables.stream_values,
            "updates": self.tables.updates,  # the requests sent to it, and their answers
        }

    def _collectable(self, status: str) -> Any:
        """The oldest runs of a finished status that finished before ``p_cutoff``.

        A run finishes after it is created, so ``created_at < cutoff`` holds for all of
        them: it bounds the index range; ``finished_at`` is checked on the rows found.
        """
        runs = self.tables.runs
        cutoff = bindparam("p_cutoff", type_=Float)
        return (
            select(runs.c.id)
            .where(
                self.ns,
                runs.c.status == status_literal(status),
                settled(runs),
                runs.c.created_at < cutoff,
                runs.c.finished_at < cutoff,
            )
            .order_by(runs.c.created_at)
        )

    def _count_collectable(self, old: Any) -> Any:
        ids = old.order_by(None).scalar_subquery()
        counts = [select(func.count()).select_from(old.order_by(None).subquery()).scalar_subquery()]
        for table in self._run_rows().values():
            counts.append(
                select(func.count())
                .where(table.c.namespace == self.namespace, table.c.run_id.in_(ids))
                .scalar_subquery()
            )
        return select(*counts)

    def _gc_in_one_statement(self, old: Any) -> Any:
        """Postgres: pick a batch (locked, skipping runs another transaction holds: a
        resume or fork of them waits for us, or we skip them) and delete it with its rows,
        in one statement; returns the counts of runs, steps, signals and state values."""
        runs = self.tables.runs
        doomed = (
            old.limit(bindparam("p_batch"))
            .with_for_update(skip_locked=True)
            .cte("doomed")
            .prefix_with("MATERIALIZED")
        )
        picked = select(doomed.c.id)
        gone = []
        for name, table in self._run_rows().items():
            removed = (
                delete(table)
                .where(table.c.namespace == self.namespace, table.c.run_id.in_(picked))
                .returning(table.c.run_id)
                .cte(f"gone_{name}")
            )
            gone.append(removed)
        finished = runs.c.status.in_([status_literal(s) for s in FINISHED_STATUSES])
        removed_runs = (
            delete(runs)
            .where(self.ns, runs.c.id.in_(picked), finished)
            .returning(runs.c.id)
            .cte("gone_runs")
        )
        counts = [
            select(func.count()).select_from(cte).scalar_subquery() for cte in (removed_runs, *gone)
        ]
        return select(*counts)
