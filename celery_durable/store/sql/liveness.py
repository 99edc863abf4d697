"""The statements of a process's proof of life: the session-level advisory lock that a
process holding leases keeps on a connection of its own.

Example::

    sql = LivenessStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.take_proof_of_life      # SELECT pg_try_advisory_lock(hashtextextended(owner, 0))
"""

from __future__ import annotations

from sqlalchemy import bindparam, func, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, proof_of_life_key


class LivenessStatements(Builder):
    """Take and give back a process's proof of life."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        key = proof_of_life_key(bindparam("p_owner"))
        # Trying, not waiting: a claimant checking the owner holds the key for a moment.
        self.take_proof_of_life = select(func.pg_try_advisory_lock(key))
        self.give_back_proof_of_life = select(func.pg_advisory_unlock(key))
