"""The statements of an item's first delivery in one transaction (Postgres only; see
``fanout/open_item.py``): open and lock it, settle, retry or convert it to a claim.

Example::

    sql = OpenItemStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.open_item       # SELECT pg_try_advisory_xact_lock(...) AS locked, ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Text, and_, bindparam, cast, false, func, literal, or_, select, true, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import ACTIVE_STATUSES, Tables
from celery_durable.store.sql.build import Builder


def item_lock(namespace: str, run_id: Any, idx: Any, item: Any) -> Any:
    """The advisory lock an item's runner holds (the same key from binds or columns)."""
    parts = (cast(part, Text) for part in (run_id, idx, item))
    key = func.concat_ws(":", literal(namespace, Text), *parts)
    return func.pg_try_advisory_xact_lock(func.hashtextextended(key, 0))


def not_run_open(namespace: str, items: Any, dialect: Dialect) -> Any:
    """Nobody runs the item in an open transaction (an item's or a batch's): its lock is
    free. Always true where there are no advisory locks (SQLite)."""
    if not dialect.advisory_locks:
        return true()
    return item_lock(namespace, items.c.run_id, items.c.idx, items.c.item)


def first_delivery(items: Any) -> Any:
    """Only a first delivery's first dispatch runs in an open transaction; anything else
    (a redelivery, a re-dispatch, a retry) is claimed."""
    return and_(
        items.c.status == "pending",
        items.c.finished_at.is_(None),
        items.c.dispatches == 1,
        items.c.attempts == 0,
        items.c.recoveries == 0,
        items.c.child_id.is_(None),
    )


def convert_to_claim(items: Any, now: Any, where: Any) -> Any:
    """UPDATE: the open items ``where`` selects become claimed ones (``p_owner``'s, with a
    lease of ``p_lease`` and the claim's attempt); RETURNING their numbers."""
    return (
        update(items)
        .where(where)
        .values(
            status="running",
            owner=bindparam("p_owner"),
            attempts=items.c.attempts + 1,
            due_at=now + bindparam("p_lease"),
        )
        .returning(items.c.item)
    )


class OpenItemStatements(Builder):
    """The statements of an item's one-transaction path (Postgres only)."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, items, now = tables.runs, tables.items, self.now
        key = and_(
            items.c.namespace == namespace,
            items.c.run_id == bindparam("p_run_id"),
            items.c.idx == bindparam("p_idx"),
            items.c.item == bindparam("p_item"),
        )
        run_active = (
            select(true())
            .where(
                self.run_is,
                or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
                runs.c.cancel_requested == false(),
            )
            .exists()
        )
        lock = item_lock(namespace, bindparam("p_run_id"), bindparam("p_idx"), bindparam("p_item"))
        first = first_delivery(items)
        self.open_item = select(
            lock.label("locked"),
            first.label("first"),
            items.c.finished_at.isnot(None).label("finished"),
            run_active.label("run_active"),
            items.c.name,
            items.c.input,
        ).where(key)
        pending = and_(key, items.c.status == "pending", items.c.finished_at.is_(None))
        self.settle_open_item = (
            update(items)
            .where(pending)
            .values(
                status=bindparam("p_status"),
                output=bindparam("p_output"),
                error=bindparam("p_error"),
                attempts=items.c.attempts + 1,
                due_at=None,
                finished_at=now,
            )
            .returning(items.c.awaited)
        )
        # As retry_item: the backoff waits in the database; the sweeper publishes it.
        self.retry_open_item = (
            update(items)
            .where(pending)
            .values(
                attempts=items.c.attempts + 1,
                error=bindparam("p_error"),
                dispatches=0,
                due_at=now + bindparam("p_delay"),
            )
            .returning(items.c.item)
        )
        # A long step becomes a claimed item: the lease now says who runs it.
        self.convert_open_item = convert_to_claim(items, now, pending)
