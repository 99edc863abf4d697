"""The statements of the actions log: what operators did to a run, and who.

Example::

    sql = ActionStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.record_action    # INSERT one action (cancel, resume, fork, signal) of one run
    sql.run_actions      # a run's actions, oldest first
"""

from __future__ import annotations

from sqlalchemy import bindparam, insert, literal, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder


class ActionStatements(Builder):
    """One row per operator action (dashboard, Django admin), read back by run."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        actions = tables.actions
        self.record_action = insert(actions).from_select(
            ["namespace", "run_id", "action", "actor", "detail", "created_at"],
            select(
                literal(namespace),
                bindparam("p_run_id"),
                bindparam("p_action"),
                bindparam("p_actor"),
                bindparam("p_detail"),
                self.now,
            ),
        )
        self.run_actions = (
            select(actions.c.action, actions.c.actor, actions.c.detail, actions.c.created_at)
            .where(actions.c.namespace == namespace, actions.c.run_id == bindparam("p_run_id"))
            .order_by(actions.c.id)
        )
