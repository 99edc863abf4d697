"""The statements of updates: store a request, take it in the body, answer or refuse it,
suspend a run until one comes, and wake the runs whose wake-up was lost.

Example::

    sql = UpdateStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.insert_update   # INSERT INTO updates ...
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, exists, literal, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.engine_names import UPDATE_STEP_PREFIX
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder

# A request stored, not taken by the body yet; the statuses of an answered one.
PENDING = "pending"
RECEIVED = "received"
ANSWERED = "answered"
REJECTED = "rejected"
REFUSED = "refused"


class UpdateStatements(Builder):
    """Store, take, answer and refuse update requests; suspend and wake their runs."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, updates, now = tables.runs, tables.updates, self.now
        mine = and_(updates.c.namespace == namespace, updates.c.run_id == bindparam("p_run_id"))
        pending = and_(mine, updates.c.status == PENDING)
        # Locking the run row serialises a request with the body's suspension: either the
        # body sees the request, or the caller's wake-up sees the run WAITING.
        self.insert_update_lock_run = self.dialect.for_update(
            select(runs.c.status).where(self.run_is)
        )
        self.insert_update_find_key = select(updates.c.id).where(
            mine, updates.c.idempotency_key == bindparam("p_key")
        )
        self.insert_update = self.insert(updates).values(
            namespace=namespace,
            run_id=bindparam("p_run_id"),
            name=bindparam("p_name"),
            payload=bindparam("p_payload"),
            idempotency_key=bindparam("p_key"),
            status=PENDING,
            created_at=now,
        )
        # The run's status first, then the request: an answer, then an end.
        self.read_update = select(
            select(runs.c.status).where(self.run_is).scalar_subquery().label("run_status"),
            updates.c.name,
            updates.c.status,
            updates.c.answer,
        ).where(mine, updates.c.id == bindparam("p_id"))
        named = and_(pending, updates.c.name == bindparam("p_name"))
        self.oldest_update = (
            select(updates.c.id, updates.c.payload).where(named).order_by(updates.c.id).limit(1)
        )
        self.receive_update = (
            update(updates)
            .where(pending, updates.c.id == bindparam("p_id"))
            .values(status=RECEIVED, idx=bindparam("p_idx"))
        )
        self.refuse_update = (
            update(updates)
            .where(pending, updates.c.id == bindparam("p_id"))
            .values(status=REFUSED, answer=bindparam("p_answer"), answered_at=now)
        )
        self.answer_update = (
            update(updates)
            .where(mine, updates.c.id == bindparam("p_id"), updates.c.status == RECEIVED)
            .values(status=bindparam("p_status"), answer=bindparam("p_answer"), answered_at=now)
        )
        self.suspend_run_has_update = select(updates.c.id).where(named).limit(1)
        self.suspend_run = self.suspend_waiting()
        # Only a wake-up lost for a dispatch grace: the caller's own wake-up comes first.
        stale = updates.c.created_at <= now - bindparam("p_grace")
        waited_for = select(updates.c.id).where(
            updates.c.namespace == namespace,
            updates.c.run_id == runs.c.id,
            updates.c.status == PENDING,
            literal(UPDATE_STEP_PREFIX).concat(updates.c.name) == runs.c.wait_signal,
            stale,
        )
        # Driven from the few pending requests (their partial index), not every waiting run.
        pending_for = select(updates.c.run_id).where(
            updates.c.namespace == namespace, updates.c.status == PENDING, stale
        )
        self.wake_updated_runs = self.wake_waiting(
            runs.c.name.in_(bindparam("p_names", expanding=True)),
            runs.c.id.in_(pending_for),
            exists(waited_for),
        )
        self.run_updates = (
            select(
                updates.c.id,
                updates.c.name,
                updates.c.status,
                updates.c.idempotency_key,
                updates.c.idx,
                updates.c.created_at,
                updates.c.answered_at,
            )
            .where(mine)
            .order_by(updates.c.id)
        )
