"""The Store's operations methods (list, stats, show, resume, fork, gc), apart from the hot
path in ``store.py``.

``Store`` inherits them; the SQL is in ``sql/operator_statements.py``. Reads run with JIT off on
Postgres: a count over a million index entries is estimated expensive enough to be
compiled, and compiling costs more than the count.

Example::

    page = store.list_runs(RunFilter(statuses=("FAILED",)), limit=51)
    stats = store.run_stats()
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from celery_durable.store.operation_records import (
    Collected,
    Forked,
    OldestRun,
    PendingSignal,
    Resumed,
    RunAction,
    RunFilter,
    RunStats,
    RunSummary,
    StateKey,
    StatusCount,
)
from celery_durable.store.records import DueRun
from celery_durable.store.sql.build import params

if TYPE_CHECKING:
    from celery_durable.store.db.connections import Connections
    from celery_durable.store.db.dialect import Dialect
    from celery_durable.store.sql.statements import Statements


def ending_step(error: str | None, steps: dict[int, str]) -> int | None:
    """The failed step that ended a run, if its record is a failure ("error").

    Settle names it in the run's error: ``"step": 3``, or ``null`` when the body failed
    elsewhere. A run without the key (cancelled, whose error is not kept, or settled by an
    older version) counts its last step if that one failed: it is the frontier, so no later
    record depends on it, and running it again is what a retry would do.
    """
    try:
        recorded = json.loads(error) if error else {}
    except ValueError:
        recorded = {}
    if isinstance(recorded, dict) and "step" in recorded:
        named = recorded["step"]
        return named if isinstance(named, int) and steps.get(named) == "error" else None
    last = max(steps, default=None)
    return last if last is not None and steps[last] == "error" else None


def first_unfinished(steps: dict[int, str]) -> int:
    """The index of the first step that has no final record ("ok" or a kept "error")."""
    index = 0
    while steps.get(index) in ("ok", "error"):
        index += 1
    return index


def filter_params(run_filter: RunFilter, limit: int) -> dict[str, Any]:
    """The bound values of ``list_runs`` for ``run_filter``."""
    values: dict[str, Any] = {"limit": limit}
    if run_filter.workflow is not None:
        values["workflow"] = run_filter.workflow
    if run_filter.since is not None:
        values["since"] = run_filter.since
    if run_filter.until is not None:
        values["until"] = run_filter.until
    if run_filter.after is not None:
        values["after_created"], values["after_id"] = run_filter.after
    return params(**values)


class AdminOps:
    """Mixed into ``Store``."""

    db: Connections
    sql: Statements
    dialect: Dialect

    @contextmanager
    def _operations_read(self) -> Iterator[Connection]:
        if not self.dialect.planner_settings:
            with self.db.read() as conn:
                yield conn
            return
        with self.db.transaction() as conn:
            conn.exec_driver_sql("SET LOCAL jit = off")
            yield conn

    def list_runs(self, run_filter: RunFilter, limit: int) -> list[RunSummary]:
        """Up to ``limit`` runs matching ``run_filter``, newest first (created_at, id)."""
        statement = self.sql.admin.list_runs(run_filter)
        with self._operations_read() as conn:
            rows = conn.execute(statement, filter_params(run_filter, limit)).all()
        return [RunSummary(*row) for row in rows]

    def run_stats(self) -> RunStats:
        """Counts by workflow and status, oldest pending and waiting runs, due backlog."""
        sql = self.sql.admin
        with self._operations_read() as conn:
            now = float(conn.execute(sql.run_stats_now).scalar_one())
            counts = conn.execute(sql.run_stats_counts).all()
            pending = conn.execute(sql.run_stats_oldest_pending).first()
            waiting = conn.execute(sql.run_stats_oldest_waiting).first()
            due, oldest_due_at = conn.execute(sql.run_stats_due).one()
        return RunStats(
            now=now,
            counts=tuple(
                StatusCount(name, status, int(runs), None if lost is None else int(lost))
                for name, status, runs, lost in sorted(counts, key=lambda row: tuple(row[:2]))
            ),
            oldest_pending=None if pending is None else OldestRun(*pending),
            oldest_waiting=None if waiting is None else OldestRun(*waiting),
            due=int(due),
            oldest_due_at=None if oldest_due_at is None else float(oldest_due_at),
        )

    def pending_signals(self, run_id: str) -> list[PendingSignal]:
        """The run's unconsumed signals, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.admin.pending_signals, params(run_id=run_id)).all()
        return [PendingSignal(*row) for row in rows]

    def state_keys(self, run_id: str) -> list[StateKey]:
        """The keys the run published with ``set_state``."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.admin.state_keys, params(run_id=run_id)).all()
        return [StateKey(*row) for row in rows]

    def record_action(
        self, run_id: str, action: str, actor: str | None, detail: str | None = None
    ) -> None:
        """Note that an operator (``actor``, None: unknown) did ``action`` to the run."""
        values = params(run_id=run_id, action=action, actor=actor, detail=detail)
        with self.db.transaction() as conn:
            conn.execute(self.sql.actions.record_action, values)

    def run_actions(self, run_id: str) -> list[RunAction]:
        """What operators did to the run, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.actions.run_actions, params(run_id=run_id)).all()
        return [RunAction(*row) for row in rows]

    def resume_run(self, run_id: str, grace: float, timeout: float | None = None) -> Resumed:
        """A FAILED or CANCELLED run becomes PENDING with a fresh attempt (and recovery)
        budget, due in ``grace`` seconds; the caller publishes it. Its recorded steps stay,
        except the failed step that ended it (its "error" record would replay the failure).
        Any other status is returned unchanged, for the caller to refuse. ``timeout``: its
        new deadline, in seconds from now (None: none)."""
        values = params(run_id=run_id, grace=grace, timeout=timeout)
        sql = self.sql.admin
        with self.db.transaction() as conn:
            found = conn.execute(sql.resume_run_lock, values).first()
            if found is None or found.status not in ("FAILED", "CANCELLED"):
                return Resumed(None if found is None else str(found.status))
            steps = {idx: status for idx, status in conn.execute(sql.resume_run_steps, values)}
            dropped = ending_step(found.error, steps)
            if dropped is not None:
                conn.execute(sql.resume_run_drop_step, params(run_id=run_id, idx=dropped))
                del steps[dropped]
            row = conn.execute(sql.resume_run, values).one()
        return Resumed(
            status=str(found.status),
            run=DueRun(*row),
            attempts=int(found.attempts),
            from_step=first_unfinished(steps),
            dropped_step=dropped,
        )

    def fork_run(
        self, run_id: str, new_id: str, from_step: int, grace: float, timeout: float | None = None
    ) -> Forked:
        """A new PENDING run ``new_id`` of the same workflow and arguments that keeps the
        steps of ``run_id`` before ``from_step`` and its unconsumed signals (both copied)
        and links to its origin; the caller publishes it. Refused (``run`` None) when
        ``from_step`` is beyond the origin's finished steps, or ``new_id`` is taken."""
        values = params(
            run_id=run_id, new_id=new_id, from_step=from_step, grace=grace, timeout=timeout
        )
        sql = self.sql.admin
        with self.db.transaction() as conn:
            origin = conn.execute(sql.fork_run_lock, values).first()
            if origin is None:
                return Forked(None)
            steps = {idx: status for idx, status in conn.execute(sql.fork_run_steps, values)}
            # The failure that ended the origin is not a finished step: it runs again.
            ended = ending_step(origin.error, steps)
            finished = first_unfinished(
                steps
                if ended is None
                else {idx: status for idx, status in steps.items() if idx != ended}
            )
            if from_step > finished:
                return Forked(str(origin.status), finished)
            row = conn.execute(sql.fork_run, values).first()
            if row is None:
                return Forked(str(origin.status), finished, taken=True)
            conn.execute(sql.fork_run_copy_steps, values)
            signals = tuple(conn.execute(sql.fork_run_copy_signals, values).scalars())
        return Forked(str(origin.status), finished, DueRun(*row), signals=signals)

    def gc_runs(self, status: str, cutoff: float, batch: int) -> Collected:
        """Delete up to ``batch`` runs of the finished ``status`` that finished before
        ``cutoff`` (epoch seconds), oldest first, with their steps, signals and state, in
        one short transaction. Never a PENDING, RUNNING or WAITING run."""
        values = params(cutoff=cutoff, batch=batch)
        sql = self.sql.admin
        if self.dialect.writes_in_ctes:
            with self.db.transaction() as conn:
                runs, steps, signals, state, *_others = conn.execute(
                    sql.gc_runs[status], values
                ).one()
            return Collected({status: runs} if runs else {}, steps, signals, state)
        with self.db.transaction() as conn:
            ids = list(conn.execute(sql.gc_runs_pick[status], values).scalars())
            if not ids:
                return Collected()
            deleted = {
                name: conn.execute(statement, params(ids=ids)).rowcount
                for name, statement in sql.gc_runs_delete.items()
            }
        return Collected(
            {status: deleted["runs"]}, deleted["steps"], deleted["signals"], deleted["state"]
        )

    def count_collectable(self, status: str, cutoff: float) -> Collected:
        """What ``gc_runs`` would delete of ``status`` for ``cutoff``, all batches."""
        with self._operations_read() as conn:
            row = conn.execute(self.sql.admin.count_collectable[status], params(cutoff=cutoff))
            runs, steps, signals, state, *_others = row.one()
        return Collected({status: runs} if runs else {}, steps, signals, state)

    def explain(
        self,
        what: str,
        run_filter: RunFilter | None = None,
        limit: int = 51,
        prefer_indexes: bool = False,
    ) -> str:
        """The database's plan for ``list_runs`` (``what="list"``, with ``run_filter``) or
        for the counts of ``run_stats`` (``what="stats"``), to check the indexes it uses.

        ``prefer_indexes``: forbid sequential scans (Postgres), to see whether an index can
        serve the query on tables too small for the planner to choose it."""
        if what == "list":
            statement = self.sql.admin.list_runs(run_filter or RunFilter())
            values = filter_params(run_filter or RunFilter(), limit)
        elif what == "stats":
            statement, values = self.sql.admin.run_stats_counts, {}
        else:
            raise ValueError(f"explain({what!r}): 'list' or 'stats'")
        with self._operations_read() as conn:
            if prefer_indexes and self.dialect.planner_settings:
                conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            compiled = statement.compile(dialect=conn.dialect)
            bound = compiled.construct_params(values)
            if compiled.positional:
                bound = tuple(bound[name] for name in compiled.positiontup or ())
            rows = conn.exec_driver_sql(self.dialect.explain + str(compiled), bound).all()
        return "\n".join(" ".join(str(value) for value in row) for row in rows)
