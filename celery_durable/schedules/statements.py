"""The statements of schedules: the row a schedule's declaration upserts, the due rows a
sweeper locks (skipping those another sweeper holds), the firing times it records, and the reads
and switches of operators.

Example::

    sql = ScheduleStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.lock_due        # SELECT ... WHERE next_slot <= now ... FOR UPDATE SKIP LOCKED
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, and_, bindparam, false, func, or_, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder

# A declaration's columns, as bound parameters of the same names (``p_`` + column).
DECLARED = (
    "workflow",
    "cron",
    "every",
    "tz",
    "args",
    "options",
    "overlap",
    "catchup",
    "catchup_window",
    "definition",
    "next_slot",
)


class ScheduleStatements(Builder):
    """Declare, fire, pause, list and backfill schedules."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        schedules, firings, runs, now = (
            tables.schedules,
            tables.schedule_slots,
            tables.runs,
            self.now,
        )
        mine = schedules.c.namespace == namespace
        named = and_(mine, schedules.c.name == bindparam("p_name"))
        declared: dict[str, Any] = {column: bindparam(f"p_{column}") for column in DECLARED}
        upsert = self.insert(schedules).values(
            namespace=namespace,
            name=bindparam("p_name"),
            **declared,
            declared_at=now,
            updated_at=now,
        )
        # Unchanged, the row keeps where it stands (a restart catches up what it missed);
        # a new definition, or a schedule declared again after the code dropped it, starts
        # from the next firing time of the declaration.
        changed = or_(
            schedules.c.definition != upsert.excluded.definition,
            schedules.c.disabled_at.isnot(None),
        )
        self.declare_schedule = upsert.on_conflict_do_update(
            index_elements=[schedules.c.namespace, schedules.c.name],
            set_={
                **{column: upsert.excluded[column] for column in DECLARED},
                "disabled_at": None,
                "buffered_slot": None,
                "declared_at": now,
                "updated_at": now,
            },
            where=changed,
        )
        self.disable_undeclared = (
            update(schedules)
            .where(
                mine,
                schedules.c.disabled_at.is_(None),
                schedules.c.workflow.in_(bindparam("p_workflows", expanding=True)),
                schedules.c.name.notin_(bindparam("p_names", expanding=True)),
            )
            .values(disabled_at=now, updated_at=now)
            .returning(schedules.c.name)
        )
        last_status = (
            select(runs.c.status)
            .where(runs.c.namespace == namespace, runs.c.id == schedules.c.last_run_id)
            .scalar_subquery()
            .label("last_status")
        )
        row = (*schedules.c, last_status)
        active = and_(mine, schedules.c.paused == false(), schedules.c.disabled_at.is_(None))
        # ``p_now``: a clock of the caller's (tests inject one); None: the database's.
        # A subquery, so Postgres reads the (volatile) clock once, not once a row.
        clock = select(func.coalesce(bindparam("p_now", type_=Float), now)).scalar_subquery()
        due = or_(schedules.c.next_slot <= clock, schedules.c.buffered_slot.isnot(None))
        # Only what this worker can start: another app on the namespace fires its own.
        mine_to_fire = schedules.c.workflow.in_(bindparam("p_workflows", expanding=True))
        locked = select(*row, clock.label("now")).where(active, due, mine_to_fire)
        locked = locked.order_by(schedules.c.next_slot).limit(bindparam("p_limit"))
        if dialect.locks_rows:
            locked = locked.with_for_update(skip_locked=True, of=schedules)
        self.lock_due = locked
        self.lock_schedule = dialect.for_update(select(*row, now.label("now")).where(named))
        self.advance = (
            update(schedules)
            .where(named)
            .values(
                next_slot=bindparam("p_next_slot"),
                last_slot=bindparam("p_last_slot"),
                last_run_id=bindparam("p_last_run_id"),
                buffered_slot=bindparam("p_buffered_slot"),
                missed=schedules.c.missed + bindparam("p_missed"),
                skipped=schedules.c.skipped + bindparam("p_skipped"),
                updated_at=now,
            )
        )
        # The firing time's row is what makes it fire once: whoever inserts it fires it.
        self.record_firing = (
            self.insert(firings)
            .values(
                namespace=namespace,
                schedule=bindparam("p_name"),
                slot=bindparam("p_slot"),
                outcome=bindparam("p_outcome"),
                run_id=bindparam("p_run_id"),
                fired_at=now,
            )
            .on_conflict_do_nothing()
            .returning(firings.c.slot)
        )
        self.set_paused = (
            update(schedules)
            .where(named)
            .values(paused=bindparam("p_paused"), updated_at=now)
            .returning(schedules.c.name)
        )
        started = and_(
            firings.c.namespace == namespace,
            firings.c.schedule == schedules.c.name,
            firings.c.outcome.in_(("started", "buffered")),
            firings.c.run_id.isnot(None),
        )
        last_lag = (
            select(firings.c.fired_at - firings.c.slot)
            .where(started, firings.c.outcome == "started")
            .order_by(firings.c.slot.desc())
            .limit(1)
            .scalar_subquery()
            .label("last_lag")
        )
        self.list_schedules = select(*row, last_lag, now.label("now")).where(mine)
        self.list_schedules = self.list_schedules.order_by(schedules.c.name)
        self.slots_of = (
            select(firings.c.slot, firings.c.outcome, firings.c.run_id, firings.c.fired_at)
            .where(firings.c.namespace == namespace, firings.c.schedule == bindparam("p_name"))
            .order_by(firings.c.slot.desc())
            .limit(bindparam("p_limit"))
        )
        self.count_slots = select(func.count()).where(
            firings.c.namespace == namespace, firings.c.schedule == bindparam("p_name")
        )
