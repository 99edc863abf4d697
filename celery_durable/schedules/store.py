"""The schedules wing's store area, held as ``store.schedules``: upsert what the code
declares, lock the due schedules for one sweeper (others skip them), record each firing time
once, pause and list. It builds its statements (``schedules/statements.py``) once per
store.

Each firing time fires once because its ``schedule_slots`` row is inserted in the transaction that
starts its run (with the run's own idempotent id), while the schedule's row is locked.

Example::

    schedules = SCHEDULES.of(store)
    with schedules.due_schedules(workflows, limit=100) as (conn, due):
        for row in due:
            if schedules.record_firing(conn, row.name, fire_at, "started", run_id):
                ...   # start the run on ``conn``
            schedules.advance_schedule(conn, row.name, next_slot=..., last_slot=fire_at, ...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from celery_durable.schedules.statements import DECLARED, ScheduleStatements
from celery_durable.store.areas import AreaKey
from celery_durable.store.sql.build import params
from celery_durable.store.store import Store


@dataclasses.dataclass(frozen=True)
class DeclaredSchedule:
    """A schedule as the code declares it; ``args`` and ``options`` are JSON text,
    ``definition`` a digest of everything that decides its firing times and runs, and
    ``next_slot`` its first firing time from now (taken only by a new or changed schedule)."""

    name: str
    workflow: str
    cron: str | None
    every: float | None
    tz: str
    args: str
    options: str
    overlap: str
    catchup: str
    catchup_window: float
    definition: str
    next_slot: float


@dataclasses.dataclass(frozen=True)
class ScheduleRow:
    """A schedule's row as the store holds it, with its last run's status (None: no run,
    or it is gone) and the database's clock."""

    namespace: str
    name: str
    workflow: str
    cron: str | None
    every: float | None
    tz: str
    args: str
    options: str
    overlap: str
    catchup: str
    catchup_window: float
    definition: str
    paused: bool
    disabled_at: float | None
    next_slot: float | None
    last_slot: float | None
    last_run_id: str | None
    buffered_slot: float | None
    missed: int
    skipped: int
    declared_at: float
    updated_at: float
    last_status: str | None
    now: float
    last_lag: float | None = None  # seconds late its last started firing time fired


@dataclasses.dataclass(frozen=True)
class Firing:
    """One firing time of a schedule: started, skipped, buffered, triggered or backfilled."""

    slot: float
    outcome: str
    run_id: str | None
    fired_at: float


def _row(found: Any) -> ScheduleRow:
    values = found._mapping
    fields = [f.name for f in dataclasses.fields(ScheduleRow)]
    return ScheduleRow(**{name: values[name] for name in fields if name in values})


class SchedulesArea:
    """Schedules declared, fired once per firing time, paused, listed."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.sql = ScheduleStatements(store.tables, store.dialect, store.namespace)

    @property
    def on_cancelled(self) -> Sequence[Any]:
        return ()

    def declare_schedules(
        self, declared: Sequence[DeclaredSchedule], workflows: Sequence[str] = ()
    ) -> list[str]:
        """Upsert the code's schedules (a changed one starts from its next firing time) and
        disable the schedules of ``workflows`` (the code's) that it no longer declares;
        their rows and runs stay. Another app's schedules on the namespace are its own.
        Returns the names disabled now."""
        sql = self.sql
        with self.db.transaction() as conn:
            for each in declared:
                values = {f"p_{c}": getattr(each, c) for c in DECLARED}
                conn.execute(sql.declare_schedule, {**values, "p_name": each.name})
            if not workflows:
                return []
            values = {"p_names": [each.name for each in declared] or [""], "p_workflows": workflows}
            return [r.name for r in conn.execute(sql.disable_undeclared, values)]

    @contextmanager
    def due_schedules(
        self, workflows: Sequence[str], limit: int, now: float | None = None
    ) -> Iterator[tuple[Connection, list[ScheduleRow]]]:
        """The active schedules of ``workflows`` with a firing time due (or a buffered one)
        at ``now`` (None: the database's clock), locked for this transaction; another
        sweeper skips them meanwhile. Commits when the block ends."""
        with self.db.transaction() as conn:
            values = params(limit=limit, now=now, workflows=list(workflows) or [""])
            rows = conn.execute(self.sql.lock_due, values).all()
            yield conn, [_row(r) for r in rows]

    @contextmanager
    def locked_schedule(self, name: str) -> Iterator[tuple[Connection, ScheduleRow | None]]:
        """One schedule's row, locked for this transaction (None: no such schedule)."""
        with self.db.transaction() as conn:
            found = conn.execute(self.sql.lock_schedule, params(name=name)).first()
            yield conn, None if found is None else _row(found)

    def record_firing(
        self, conn: Connection, name: str, fire_at: float, outcome: str, run_id: str | None
    ) -> bool:
        """Record the schedule's firing time; False: it was recorded before (it fired already)."""
        values = params(name=name, slot=fire_at, outcome=outcome, run_id=run_id)
        return conn.execute(self.sql.record_firing, values).first() is not None

    def advance_schedule(
        self,
        conn: Connection,
        name: str,
        *,
        next_slot: float | None,
        last_slot: float | None,
        last_run_id: str | None,
        buffered_slot: float | None,
        missed: int = 0,
        skipped: int = 0,
    ) -> None:
        """Where the schedule stands after a firing, in the firing's transaction."""
        conn.execute(
            self.sql.advance,
            params(
                name=name,
                next_slot=next_slot,
                last_slot=last_slot,
                last_run_id=last_run_id,
                buffered_slot=buffered_slot,
                missed=missed,
                skipped=skipped,
            ),
        )

    def set_schedule_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume a schedule; False: there is no such schedule."""
        with self.db.transaction() as conn:
            done = conn.execute(self.sql.set_paused, params(name=name, paused=paused))
            return done.first() is not None

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule of the namespace, by name, with its last lag."""
        with self.db.read() as conn:
            return [_row(r) for r in conn.execute(self.sql.list_schedules)]

    def firings(self, name: str, limit: int = 20) -> list[Firing]:
        """The schedule's latest firing times, newest first."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.slots_of, params(name=name, limit=limit))
            return [Firing(*r) for r in rows]


SCHEDULES: AreaKey[SchedulesArea] = AreaKey("schedules", SchedulesArea)
