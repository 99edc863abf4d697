"""The statements of fleet-wide limiters: a key's slots (one row each, taken with FOR
UPDATE SKIP LOCKED, so takers of one key don't wait for each other), a key's row (its token
bucket, locked by every grant of a rate), the grants (runs waiting for a slot, and tokens
held by runs of a limiter with a rate and no concurrency), and the runs that wait.

A slot counts while its holder is live: its run running under its lease, or pending within
the dispatch grace of the publish that handed it the slot, and, for a step's slot, the step
not yet recorded. So a slot is free, without a write, once its step is recorded, its run
settles or waits, or a dead worker's lease is out; a release writes only to hand it on.

Example::

    sql = LimiterStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.take_slot         # UPDATE slots SET run_id ... WHERE slot = (... SKIP LOCKED)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    case,
    delete,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    text,
    true,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueRun
from celery_durable.store.schema import FINISHED_STATUSES, Tables
from celery_durable.store.sql.build import Builder, columns_of

WHOLE_RUN = -1  # the step index of a whole run's slot (a limited workflow)


def others_waiting(
    grants: Any, namespace: str, limiter: Any, key: Any, run_id: Any, idx: Any
) -> Any:
    """A grant of another holder still waiting for the key: then a release hands it on."""
    return and_(
        grants.c.namespace == namespace,
        grants.c.limiter == limiter,
        grants.c.key == key,
        grants.c.held == false(),
        not_(and_(grants.c.run_id == run_id, grants.c.idx == idx)),
    )


UNSEEN_HOLDER_S = 3600.0  # a slot's holder not in the runs table counts this long


class LimiterStatements(Builder):
    """Take, wait for, hand off and free a limiter's slots; read them for operators."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, keys, grants, now = tables.runs, tables.limiter_keys, tables.limiter_grants, self.now
        of_key = and_(
            keys.c.namespace == namespace,
            keys.c.limiter == bindparam("p_limiter"),
            keys.c.key == bindparam("p_key"),
        )
        self.add_key = (
            self.insert(keys)
            .values(
                namespace=namespace,
                limiter=bindparam("p_limiter"),
                key=bindparam("p_key"),
                tokens=0.0,  # a new bucket fills at the rate: no burst at first use
                refilled_at=now,
            )
            .on_conflict_do_nothing()
        )
        self.lock_key = dialect.for_update(
            select(keys.c.tokens, keys.c.refilled_at, now.label("now")).where(of_key)
        )
        self.spend_tokens = (
            update(keys)
            .where(of_key)
            .values(tokens=bindparam("p_tokens"), refilled_at=bindparam("p_now"))
        )
        grant_is = and_(
            grants.c.namespace == namespace,
            grants.c.run_id == bindparam("p_run_id"),
            grants.c.idx == bindparam("p_idx"),
            grants.c.limiter == bindparam("p_limiter"),
        )
        of_grants_key = and_(
            grants.c.namespace == namespace,
            grants.c.limiter == bindparam("p_limiter"),
            grants.c.key == bindparam("p_key"),
        )
        # A holder is live while running under its lease or pending within the grace of
        # the publish that handed it its slot (due_at is either).
        holder_live = exists().where(
            runs.c.namespace == grants.c.namespace,
            runs.c.id == grants.c.run_id,
            runs.c.status.in_(("RUNNING", "PENDING")),
            runs.c.due_at.isnot(None),
            runs.c.due_at > now,
        )
        self.grant_of = select(grants.c.held, grants.c.priority, grants.c.requested_at).where(
            grant_is
        )
        mine_priority: Any = bindparam("p_priority")
        mine_since: Any = bindparam("p_since")
        self.count_waiters_ahead = select(func.count()).where(
            of_grants_key,
            grants.c.held == false(),
            not_(
                and_(grants.c.run_id == bindparam("p_run_id"), grants.c.idx == bindparam("p_idx"))
            ),
            or_(
                grants.c.priority > mine_priority,
                and_(grants.c.priority == mine_priority, grants.c.requested_at < mine_since),
            ),
        )
        new_grant = {
            "namespace": namespace,
            "run_id": bindparam("p_run_id"),
            "idx": bindparam("p_idx"),
            "limiter": bindparam("p_limiter"),
            "key": bindparam("p_key"),
            "priority": bindparam("p_priority"),
            # Waiters are served oldest run first (its start), not in the order they
            # reached the limiter: a run that was slower to park keeps its place.
            "requested_at": func.coalesce(
                select(runs.c.created_at).where(self.run_is).scalar_subquery(), now
            ),
        }
        self.count_other_waiters = select(func.count()).where(
            of_grants_key,
            grants.c.held == false(),
            not_(
                and_(grants.c.run_id == bindparam("p_run_id"), grants.c.idx == bindparam("p_idx"))
            ),
        )
        self.add_waiter = (
            self.insert(grants).values(**new_grant, held=False).on_conflict_do_nothing()
        )
        self.take_grant = (
            self.insert(grants)
            .values(**new_grant, held=True, granted_at=now)
            .on_conflict_do_update(
                index_elements=[
                    grants.c.namespace,
                    grants.c.run_id,
                    grants.c.idx,
                    grants.c.limiter,
                ],
                set_={"held": True, "granted_at": now},
            )
        )
        self.release_grant = delete(grants).where(grant_is)
        next_waiters = (
            select(grants.c.run_id, grants.c.idx)
            .where(of_grants_key, grants.c.held == false())
            .order_by(grants.c.priority.desc(), grants.c.requested_at, grants.c.run_id)
            .limit(bindparam("p_limit"))
        )
        # Two hand-offs of one key (a release, a sweep) never pick the same waiter, and
        # not SKIP LOCKED: one that skipped a waiter another had locked would serve the
        # next one first. The second waits; the waiter the first served is gone by then.
        self.next_waiters = dialect.for_update(next_waiters)
        picked = and_(
            grants.c.namespace == namespace,
            grants.c.limiter == bindparam("p_limiter"),
            grants.c.run_id == bindparam("p_run_id"),
            grants.c.idx == bindparam("p_idx"),
        )
        self.hand_grant = update(grants).where(picked).values(held=True, granted_at=now)
        # The run waited for this limiter (WAITING at a step, or PENDING with no message):
        # due now, for the caller to publish; a lost publish is the sweeper's after the grace.
        self.wake_waiter = (
            update(runs)
            .where(
                self.run_is,
                runs.c.wait_limiter == bindparam("p_limiter"),
                runs.c.status.in_(("WAITING", "PENDING")),
            )
            .values(
                status="PENDING",
                wait_limiter=None,
                due_at=now + bindparam("p_grace"),
                ready_at=None,
                dispatches=0,
                updated_at=now,
            )
            .returning(*columns_of(runs, DueRun))
        )
        # The run waits for a slot. A running one gives its lease and its attempt back
        # (nothing failed); one not yet published simply has no due time.
        waiting_for = {"wait_limiter": bindparam("p_limiter"), "owner": None, "updated_at": now}
        self.suspend_for_limiter = (
            update(runs)
            .where(self.live)
            .values(**waiting_for, status="WAITING", due_at=None, ready_at=None)
            .returning(runs.c.id)
        )
        self.park_for_limiter = (
            update(runs)
            .where(self.live)
            .values(
                **waiting_for,
                status="PENDING",
                due_at=None,
                ready_at=None,
                attempts=runs.c.attempts - 1,
            )
            .returning(runs.c.id)
        )
        self.park_new_run = (
            update(runs)
            .where(self.run_is, runs.c.status == "PENDING", runs.c.started_at.is_(None))
            .values(**waiting_for, due_at=None, ready_at=None)
            .returning(runs.c.id)
        )
        # Rows of no use: slots of holders no longer live, waits of runs that finished.
        lapsed = or_(
            and_(grants.c.held == true(), not_(holder_live)),
            and_(
                grants.c.held == false(),
                not_(
                    exists().where(
                        runs.c.namespace == grants.c.namespace,
                        runs.c.id == grants.c.run_id,
                        runs.c.status.notin_(FINISHED_STATUSES),
                    )
                ),
            ),
        )
        self.free_lapsed_grants = delete(grants).where(
            grants.c.namespace == namespace, grants.c.limiter == bindparam("p_limiter"), lapsed
        )
        self.keys_waited_for = (
            select(grants.c.key)
            .where(
                grants.c.namespace == namespace,
                grants.c.limiter == bindparam("p_limiter"),
                grants.c.held == false(),
            )
            .group_by(grants.c.key)
            .order_by(func.min(grants.c.requested_at))
        )
        self.limiter_usage = (
            select(
                grants.c.limiter,
                grants.c.key,
                func.count().filter(and_(grants.c.held == true(), holder_live)).label("in_use"),
                func.count().filter(grants.c.held == false()).label("waiting"),
                func.min(grants.c.requested_at).filter(grants.c.held == false()).label("since"),
                now.label("now"),
            )
            .where(grants.c.namespace == namespace)
            .group_by(grants.c.limiter, grants.c.key)
            .order_by(grants.c.limiter, grants.c.key)
        )
        self._slot_statements(tables, namespace)
        self.limiter_buckets = select(
            keys.c.limiter, keys.c.key, keys.c.tokens, keys.c.refilled_at, now.label("now")
        ).where(keys.c.namespace == namespace)

    def _slot_statements(self, tables: Tables, namespace: str) -> None:
        """A key's slot rows: taken (the first free one at or after ``p_from``, skipping the
        rows other takers have locked), confirmed, handed on, freed, counted."""
        slots, grants, now = tables.limiter_slots, tables.limiter_grants, self.now
        free, mine = slots.alias("free"), slots.alias("mine")
        limiter: Any = bindparam("p_limiter")
        key: Any = bindparam("p_key")
        run_id: Any = bindparam("p_run_id")
        idx: Any = bindparam("p_idx", type_=Integer)
        concurrency: Any = bindparam("p_concurrency", type_=Integer)
        of_key = and_(
            slots.c.namespace == namespace, slots.c.limiter == limiter, slots.c.key == key
        )

        def free_slot(*guards: Any) -> Any:
            """The first free row at or after ``p_from``, locked, skipping rows other
            takers have locked. The ``guards`` go inside it: a take they refuse locks
            no free row, which would hide it from a hand-off until the refused taker's
            transaction ends."""
            found = (
                select(free.c.slot)
                .where(
                    *guards,
                    free.c.namespace == namespace,
                    free.c.limiter == limiter,
                    free.c.key == key,
                    free.c.slot >= bindparam("p_from", type_=Integer),
                    free.c.slot < concurrency,
                    not_(self.slot_live(free)),
                )
                .order_by(free.c.slot)
                .limit(1)
            )
            if self.dialect.locks_rows:
                found = found.with_for_update(skip_locked=True)
            return found.scalar_subquery()

        holding = exists().where(
            mine.c.namespace == namespace,
            mine.c.limiter == limiter,
            mine.c.run_id == run_id,
            mine.c.idx == idx,
        )
        waiting = others_waiting(grants, namespace, limiter, key, run_id, idx)
        others = grants.alias("others")
        since = func.coalesce(
            select(others.c.requested_at)
            .where(
                others.c.namespace == namespace,
                others.c.limiter == limiter,
                others.c.run_id == run_id,
                others.c.idx == idx,
            )
            .scalar_subquery(),
            now,
        )
        priority: Any = bindparam("p_priority", type_=Integer)
        ahead = exists().where(
            waiting,
            or_(
                grants.c.priority > priority,
                and_(grants.c.priority == priority, grants.c.requested_at < since),
            ),
        )
        # Whether other runs wait for this key: then a release must hand the slot on. And
        # whether this one waited: its wait is over.
        waited = exists().where(waiting).label("waited")
        queued = (
            exists()
            .where(
                others.c.namespace == namespace,
                others.c.limiter == limiter,
                others.c.run_id == run_id,
                others.c.idx == idx,
            )
            .label("queued")
        )

        def take(*guards: Any) -> Any:
            return (
                update(slots)
                .where(of_key, slots.c.slot == free_slot(not_(holding), *guards))
                .values(run_id=run_id, idx=idx, taken_at=now)
                .returning(slots.c.slot, waited, queued)
            )

        self.take_slot = take(not_(ahead))
        # The take with other guards, for a statement that folds it in (a claim's, a
        # start's: limiters/run_slot_statements.py).
        self.take_when = lambda *guards: take(not_(ahead), *guards)
        # A running step's take, in one statement: only while its run holds the lease.
        self.take_slot_fenced = take(not_(ahead), exists().where(self.live))
        self.hand_slot = take()  # to the next waiter: it is the one ahead
        held_by = and_(
            slots.c.namespace == namespace,
            slots.c.limiter == limiter,
            slots.c.run_id == run_id,
            slots.c.idx == idx,
        )
        self.confirm_slot = (
            update(slots)
            .where(held_by, slots.c.slot < concurrency)
            .values(taken_at=now)
            .returning(slots.c.slot, waited)
        )
        self.slot_of = select(slots.c.slot, waited).where(held_by, slots.c.slot < concurrency)
        self.release_slot_row = (
            update(slots).where(held_by).values(run_id=None, idx=None, taken_at=None)
        )
        self.count_slot_rows = select(func.count()).where(of_key)
        # A take that finds nothing can still hold a row's lock: one that looked free to
        # it, taken by another since, fails its recheck and stays locked (Postgres keeps
        # the lock). Held into lock_key_slots, it deadlocks against another taker's rows
        # locked in order; a take made between these drops it when it finds nothing.
        self.begin_take = text("SAVEPOINT limiter_take")
        self.undo_take = text("ROLLBACK TO SAVEPOINT limiter_take")
        self.end_take = text("RELEASE SAVEPOINT limiter_take")
        # Waits for every take of the key in flight: what a take reads after it is sure.
        self.lock_key_slots = self.dialect.for_update(
            select(slots.c.slot).where(of_key, slots.c.slot < concurrency).order_by(slots.c.slot)
        )
        self.add_slot_row = (
            self.insert(slots)
            .values(namespace=namespace, limiter=limiter, key=key, slot=bindparam("p_slot"))
            .on_conflict_do_nothing()
        )
        self.slots_in_use = (
            select(
                slots.c.limiter,
                slots.c.key,
                func.count().filter(self.slot_live(slots)).label("in_use"),
            )
            .where(slots.c.namespace == namespace)
            .group_by(slots.c.limiter, slots.c.key)
        )

    def slot_live(self, slots: Any) -> Any:
        """The slot's holder is live: its run is pending with a due time (published) or
        running under its lease, and a step's slot is held until the step is recorded.

        Scalar subqueries on each primary key, not EXISTS: the planner can't turn them into
        a hashed scan of a whole table (which a plan made while the tables were small would
        keep), and no partial index matches their conditions."""
        runs, steps = self.tables.runs, self.tables.steps
        # A pending run with a due time was published (or will be, by the sweeper): it
        # keeps the slot it was started or woken with until it runs. Not IN (...): these
        # statements go to psycopg compiled once, with no expanding parameters.
        run_live = (
            select(
                case(
                    (and_(runs.c.status == "PENDING", runs.c.due_at.isnot(None)), 1),
                    (and_(runs.c.status == "RUNNING", runs.c.due_at > self.now), 1),
                    else_=0,
                )
            )
            .where(runs.c.namespace == slots.c.namespace, runs.c.id == slots.c.run_id)
            .scalar_subquery()
        )
        step_recorded = (
            select(case((or_(steps.c.status == "ok", steps.c.status == "error"), 1), else_=0))
            .where(
                steps.c.namespace == slots.c.namespace,
                steps.c.run_id == slots.c.run_id,
                steps.c.idx == slots.c.idx,
            )
            .scalar_subquery()
        )
        # A holder this statement can't see was inserted with its slot by a transaction
        # that committed after the statement began (a start): live. A holder long gone
        # (its run deleted by gc) is not.
        unseen = case((slots.c.taken_at > self.now - UNSEEN_HOLDER_S, 1), else_=0)
        return and_(
            slots.c.run_id.isnot(None),
            func.coalesce(run_live, unseen) == 1,
            func.coalesce(step_recorded, 0) == 0,
        )
