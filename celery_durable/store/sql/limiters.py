"""The statements of fleet-wide limiters: a key's row (its token bucket, and the lock
every grant of that key takes), the grants (slots held and waited for), and the runs that
wait for one.

A slot counts while its holder is live: running under its lease, or pending within the
dispatch grace of the publish that handed it the slot. So a dead worker's slot is free once
its lease is out, whoever notices first; ``free_lapsed_grants`` only tidies the rows.

Example::

    sql = LimiterStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.lock_key          # SELECT tokens, refilled_at, now ... FOR UPDATE
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
        self.count_in_use = select(func.count()).where(
            of_grants_key, grants.c.held == true(), holder_live
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
            "requested_at": now,
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
        self.limiter_buckets = select(
            keys.c.limiter, keys.c.key, keys.c.tokens, keys.c.refilled_at, now.label("now")
        ).where(keys.c.namespace == namespace)
