"""The statements of fleet-wide limiters: a key's row (its token bucket, and the lock
every grant of that key takes), the grants (slots held and waited for), and the runs that
wait for one.

A slot counts while its holder is live: running under its lease, or pending within the
dispatch grace of the publish that handed it the slot. So a dead worker's slot is free once
its lease is out, whoever notices first; a finished step's grant goes with its record's
commit, and ``free_lapsed_grants`` only tidies rows.

Example::

    sql = LimiterStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.lock_key          # INSERT ... ON CONFLICT DO UPDATE ... RETURNING tokens, ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    delete,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    true,
    update,
)

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueRun
from celery_durable.store.schema import FINISHED_STATUSES, Tables
from celery_durable.store.sql.build import Builder, columns_of


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
        # The key's row, made on first use and locked (an upsert locks the row it meets) so
        # that grants and hand-offs of one key queue up behind each other.
        self.lock_key = (
            self.insert(keys)
            .values(
                namespace=namespace,
                limiter=bindparam("p_limiter"),
                key=bindparam("p_key"),
                tokens=0.0,  # a new bucket fills at the rate: no burst at first use
                refilled_at=now,
            )
            .on_conflict_do_update(
                index_elements=[keys.c.namespace, keys.c.limiter, keys.c.key],
                set_={"tokens": keys.c.tokens},
            )
            .returning(keys.c.tokens, keys.c.refilled_at, now.label("now"))
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
        # A slot counts while its holder is live: running under its lease, or pending
        # within the grace of the publish that handed it the slot (due_at is either). A
        # step's record deletes its grant in the same transaction (Store.record_step).
        holder_live = exists().where(
            runs.c.namespace == grants.c.namespace,
            runs.c.id == grants.c.run_id,
            runs.c.status.in_(("RUNNING", "PENDING")),
            runs.c.due_at.isnot(None),
            runs.c.due_at > now,
        )
        in_use = and_(grants.c.held == true(), holder_live)
        self.count_in_use = select(func.count()).where(of_grants_key, in_use)
        # The caller's grant, if any, and what stands before it: the slots in use and the
        # waiters ahead of it (higher priority, or as high and older), in one round trip.
        mine = grants.alias("mine")
        mine_is = and_(
            mine.c.namespace == namespace,
            mine.c.run_id == bindparam("p_run_id"),
            mine.c.idx == bindparam("p_idx"),
            mine.c.limiter == bindparam("p_limiter"),
        )
        mine_since = func.coalesce(
            select(mine.c.requested_at).where(mine_is).scalar_subquery(), now
        )
        mine_priority: Any = bindparam("p_priority")
        waiters_ahead = select(func.count()).where(
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
        self.slot_state = select(
            func.coalesce(select(mine.c.held).where(mine_is).scalar_subquery(), false()).label(
                "held"
            ),
            self.count_in_use.scalar_subquery().label("in_use"),
            waiters_ahead.scalar_subquery().label("ahead"),
        )
        new_grant = {
            "namespace": namespace,
            "run_id": bindparam("p_run_id"),
            "idx": bindparam("p_idx"),
            "limiter": bindparam("p_limiter"),
            "key": bindparam("p_key"),
            "priority": bindparam("p_priority"),
            "requested_at": now,
        }
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
        self.next_waiters = (
            select(grants.c.run_id, grants.c.idx)
            .where(of_grants_key, grants.c.held == false())
            .order_by(grants.c.priority.desc(), grants.c.requested_at, grants.c.run_id)
            .limit(bindparam("p_limit"))
        )
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
            and_(grants.c.held == true(), not_(in_use)),
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
                func.count().filter(in_use).label("in_use"),
                func.count().filter(grants.c.held == false()).label("waiting"),
                func.min(grants.c.requested_at).filter(grants.c.held == false()).label("since"),
                now.label("now"),
            )
            .where(grants.c.namespace == namespace)
            .group_by(grants.c.limiter, grants.c.key)
            .order_by(grants.c.limiter, grants.c.key)
        )
        self.limiter_buckets = select(
            keys.c.limiter, keys.c.key, keys.c.tokens, keys.c.refilled_at, now.label("now")
        ).where(keys.c.namespace == namespace)
