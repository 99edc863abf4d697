"""The statements of a process's proof of life: the session-level advisory lock that a
process holding leases keeps on a connection of its own, and the claimant's look at
whose lock is gone.

Example::

    sql = LivenessStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.take_proof_of_life      # SELECT pg_try_advisory_lock(hashtextextended(owner, 0))
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, and_, bindparam, func, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import PROOF_OF_LIFE, Builder, proof_of_life_key


class LivenessStatements(Builder):
    """Take and give back a process's proof of life; find the owners whose proof is gone."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        key = proof_of_life_key(bindparam("p_owner"))
        # Trying, not waiting: a claimant checking the owner holds the key for a moment.
        self.take_proof_of_life = select(func.pg_try_advisory_lock(key))
        self.give_back_proof_of_life = select(func.pg_advisory_unlock(key))
        runs = tables.runs
        window: Any = bindparam("p_lease_window", type_=Float)
        # A lease still running (due within the window: the longest a lease runs ahead),
        # held by an owner that declared a proof of life.
        # Bounded by the statement's stable clock: a volatile one (clock_timestamp) can't
        # bound an index scan, and the sweeper asks this every poll among all waiting runs.
        stable = self.dialect.stable_now
        live_lease = and_(
            runs.c.status == "RUNNING",
            runs.c.due_at >= stable,
            runs.c.due_at <= stable + window,
            runs.c.owner.like(f"%{PROOF_OF_LIFE}"),
        )
        # Each owner once (a lock try per process, not per run): the volatile lock try
        # stays outside the DISTINCT, so it runs on its rows only.
        owners = select(runs.c.owner).where(self.ns, live_lease).distinct().subquery("owners")
        self.find_gone_owners = select(owners.c.owner).where(
            self.owner_is_gone(window, owners.c.owner)
        )
        self.find_gone_owner_of_run = select(runs.c.owner).where(
            self.run_is, live_lease, self.owner_is_gone(window)
        )
