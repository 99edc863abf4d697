"""The claim of a run behind a concurrency limiter (``@durable.workflow(limiter=...)``,
``concurrency=``): ``claim_run`` that also returns the slot the run holds, so a first
delivery learns it in the claim's round trip instead of reading it after.

It also holds the claim that takes the slot of the run's first step (a step behind a
limiter, as the last run of the workflow in this process showed), so that step starts
without a take of its own.

Example::

    sql.limited_runs.claim_limited_run   # UPDATE runs ... RETURNING ..., held_slot, slot_waited
    sql.limited_runs.claim_taking_slot   # WITH claimed AS (UPDATE runs), taken AS (UPDATE slots)
    sql.limited_runs.start_taking_slot   # WITH inserted AS (INSERT runs), taken AS (UPDATE slots)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, and_, bindparam, exists, false, func, select

from celery_durable.limiters.statements import WHOLE_RUN, LimiterStatements, others_waiting
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder
from celery_durable.store.sql.runs import RunStatements


class LimitedRunStatements(Builder):
    """``claim_limited_run``: binds ``p_limiter`` and ``p_concurrency`` besides the claim's.
    ``claim_taking_slot`` (Postgres): the claim's columns, then the taken slot, whether
    others wait for it and whether the run had waited for it (None, None, None: none
    taken); binds a take's parameters (``LimiterOps._slot_params``) besides the claim's.
    ``start_taking_slot`` (Postgres): a limited run's insert with the take of its slot,
    returning (inserted, the slot taken or None)."""

    def __init__(
        self,
        tables: Tables,
        dialect: Dialect,
        namespace: str,
        claims: RunStatements,
        limiters: LimiterStatements,
    ) -> None:
        super().__init__(tables, dialect, namespace)
        slots, grants, runs = tables.limiter_slots, tables.limiter_grants, tables.runs
        limiter: Any = bindparam("p_limiter")
        concurrency: Any = bindparam("p_concurrency", type_=Integer)
        # The slot row the claimed run holds for its whole run (found by the holder index,
        # not by key: the key is the workflow's arguments', known only once claimed).
        held = and_(
            slots.c.namespace == namespace,
            slots.c.limiter == limiter,
            slots.c.run_id == runs.c.id,
            slots.c.idx == WHOLE_RUN,
            slots.c.slot < concurrency,
        )
        # Correlated by hand: nested in the EXISTS below, the key's subquery would else list
        # the runs table in a FROM of its own.
        held_slot = select(slots.c.slot).where(held).limit(1).correlate(runs).scalar_subquery()
        held_key = select(slots.c.key).where(held).limit(1).correlate(runs).scalar_subquery()
        # Whether other runs wait for that key, as LimiterOps.confirm_slot reads it: then
        # the settle hands the slot on.
        waiting = others_waiting(grants, namespace, limiter, held_key, runs.c.id, WHOLE_RUN)
        waited = exists().where(waiting).correlate(runs)
        self.claim_limited_run = claims.claim_run.returning(
            held_slot.label("held_slot"), waited.label("slot_waited")
        )
        self.claim_taking_slot: Any = None
        self.start_taking_slot: Any = None
        if dialect.round_trips:
            # One statement, not a pipelined transaction of two. The take can't see the
            # new row: the insert's RETURNING is its guard (a run of that id that existed
            # before inserts nothing, so takes nothing).
            inserted = claims.insert_run.cte("inserted")
            at_start = limiters.take_when(exists(select(inserted.c.id))).cte("taken")
            self.start_taking_slot = select(
                select(func.count()).select_from(inserted).scalar_subquery(),
                select(at_start.c.slot).scalar_subquery(),
            )
            # The take sees the tables as before the claim: the claimed run's liveness is
            # the claim's own row. Only a first delivery's (no step recorded yet), and not a
            # saga's handed back to roll back.
            claimed = claims.claim_run.cte("claimed")
            first = select(claimed.c.fence).where(
                claimed.c.has_steps == false(), claimed.c.cancel_requested == false()
            )
            taken = limiters.take_when(exists(first)).cte("taken")
            self.claim_taking_slot = select(
                *claimed.c,
                select(taken.c.slot).scalar_subquery(),
                select(taken.c.waited).scalar_subquery(),
                select(taken.c.queued).scalar_subquery(),
            )
