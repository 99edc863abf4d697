"""The statements of ``set_state`` and ``query``: values a workflow publishes.

Example::

    sql = StateStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.set_state      # a fenced upsert that also NOTIFYs query(wait=) waiters on Postgres
"""

from __future__ import annotations

from sqlalchemy import bindparam, func, literal, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder


class StateStatements(Builder):
    """Values a workflow publishes with ``set_state``."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        state = tables.state
        upsert = self.fenced_upsert(
            state,
            {
                "namespace": literal(namespace),
                "run_id": bindparam("p_run_id"),
                "key": bindparam("p_key"),
                "value": bindparam("p_value"),
                "updated_at": self.now,
            },
            conflict=[state.c.namespace, state.c.run_id, state.c.key],
            updates=("value", "updated_at"),
        ).returning(state.c.key, state.c.run_id)
        # On Postgres the write also wakes ``handle.query(key, wait=...)`` (LISTEN/NOTIFY).
        self.set_state = upsert
        if self.dialect.notifies:
            changed = upsert.cte("changed")
            channel = f"{tables.runs.name.removesuffix('runs')}events"
            self.set_state = select(
                changed.c.key,
                func.pg_notify(channel, literal(namespace + ":").concat(changed.c.run_id)),
            ).select_from(changed)
        self.get_state = select(state.c.value).where(
            state.c.namespace == namespace,
            state.c.run_id == bindparam("p_run_id"),
            state.c.key == bindparam("p_key"),
        )
