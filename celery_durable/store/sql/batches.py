"""The statements of batched items (``cd.map(..., batch_size=K)``): one Celery task claims
a run of consecutive items at once, runs them in order and records them together (see
``store/batches.py``). The claim itself is ``claim_item``'s, over a range of items: both
are built by :func:`claim_update`.

Example::

    sql = BatchStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.claim_batch       # UPDATE ... WHERE item >= first AND item < first + count RETURNING ...
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, case, exists, false, literal, or_, select, update

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import ACTIVE_STATUSES, Tables
from celery_durable.store.sql.build import Builder

# The error of an item whose run was cancelled or finished before the item ran.
RUN_OVER = "the run was cancelled or had finished before this item ran"


def claim_update(tables: Tables, namespace: str, now: Any, where: Any) -> Any:
    """Claim the items ``where`` selects: pending and dispatched ones, or running ones
    whose lease expired (a recovery, not an attempt). An item of a run that is cancelled
    or over becomes "cancelled" instead. Returns (item, status, name, input, attempts)."""
    runs, items = tables.runs, tables.items
    lost = items.c.status == "running"
    # Spelled out, not IN (...): claim_item runs on the precompiled psycopg path, which
    # can't expand a list parameter.
    run_active = exists().where(
        runs.c.namespace == namespace,
        runs.c.id == items.c.run_id,
        or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
        runs.c.cancel_requested == false(),
    )
    claimable = or_(
        and_(items.c.status == "pending", items.c.dispatches > 0),
        and_(
            lost,
            items.c.due_at < now,
            items.c.recoveries + 1 < bindparam("p_max_recoveries"),
        ),
    )
    return (
        update(items)
        .where(where, items.c.child_id.is_(None), claimable)
        .values(
            status=case((run_active, "running"), else_="cancelled"),
            owner=case((run_active, bindparam("p_owner")), else_=None),
            attempts=items.c.attempts + case((and_(run_active, ~lost), 1), else_=0),
            recoveries=items.c.recoveries + case((and_(run_active, lost), 1), else_=0),
            due_at=case((run_active, now + bindparam("p_lease")), else_=None),
            finished_at=case((run_active, None), else_=now),
            error=case((run_active, items.c.error), else_=literal(RUN_OVER)),
        )
        .returning(items.c.item, items.c.status, items.c.name, items.c.input, items.c.attempts)
    )


class BatchStatements(Builder):
    """Claim a batch of items, check what it still holds, cancel what it has not run."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, items = tables.runs, tables.items
        first: Any = bindparam("p_first")
        in_batch = and_(
            items.c.namespace == namespace,
            items.c.run_id == bindparam("p_run_id"),
            items.c.idx == bindparam("p_idx"),
            items.c.item >= first,
            items.c.item < first + bindparam("p_count"),
        )
        self.claim_batch = claim_update(tables, namespace, self.now, in_batch)
        held = and_(in_batch, items.c.status == "running", items.c.owner == bindparam("p_owner"))
        # Between items: those still held (not revoked, not taken over), and whether the
        # run may go on; read at most once a poll interval.
        self.check_batch_items = select(items.c.item).where(held)
        self.check_batch_run = select(runs.c.id).where(
            self.run_is,
            or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
            runs.c.cancel_requested == false(),
        )
        # The run was cancelled (or is over) mid-batch: the items not run yet never run,
        # as a cancelled run's pending items.
        self.cancel_batch_rest = (
            update(items)
            .where(held)
            .values(
                status="cancelled",
                error=literal(RUN_OVER),
                owner=None,
                due_at=None,
                finished_at=self.now,
            )
        )
