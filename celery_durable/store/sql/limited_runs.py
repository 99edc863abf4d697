"""The claim of a run behind a concurrency limiter (``@durable.workflow(limiter=...)``,
``concurrency=``): ``claim_run`` that also returns the slot the run holds, so a first
delivery learns it in the claim's round trip instead of reading it after.

Example::

    sql.limited_runs.claim_limited_run   # UPDATE runs ... RETURNING ..., held_slot, slot_waited
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, and_, bindparam, exists, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder
from celery_durable.store.sql.limiters import WHOLE_RUN, others_waiting
from celery_durable.store.sql.runs import RunStatements


class LimitedRunStatements(Builder):
    """``claim_limited_run``: binds ``p_limiter`` and ``p_concurrency`` besides the claim's."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, claims: RunStatements
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
