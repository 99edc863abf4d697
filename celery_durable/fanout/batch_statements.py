"""The statements of batched items (``cd.map(..., batch_size=K)``): one Celery task claims
a run of consecutive items at once, runs them in order and records them together (see
``fanout/batches.py``). The claim itself is ``claim_item``'s, over a range of items: both
are built by ``claim_update``.

Example::

    sql = BatchStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.claim_batch       # UPDATE ... WHERE item >= first AND item < first + count RETURNING ...
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    Text,
    and_,
    bindparam,
    case,
    cast,
    column,
    exists,
    false,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSON

from celery_durable.fanout.open_item_statements import (
    convert_to_claim,
    first_delivery,
    item_lock,
    not_run_open,
)
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import Settled
from celery_durable.store.schema import ACTIVE_STATUSES, Tables
from celery_durable.store.sql.build import Builder

# A batch's outcomes as settle_batch's JSON parameter carries them (see fanout/batches.py).
OUTCOME_COLUMNS = (
    ("item", Integer),
    ("status", Text),
    ("output", Text),
    ("error", Text),
    ("delay", Float),
)


def outcomes_param(outcomes: Sequence[Settled]) -> dict[str, Any]:
    """``p_outcomes``: the outcomes as one JSON array (one text parameter costs far less
    than an array parameter per column, as for the settle's carried records)."""
    rows = [{name: getattr(done, name) for name, _ in OUTCOME_COLUMNS} for done in outcomes]
    return {"p_outcomes": json.dumps(rows, ensure_ascii=False)}


# The error of an item whose run was cancelled or finished before the item ran.
RUN_OVER = "the run was cancelled or had finished before this item ran"


def run_active(tables: Tables, namespace: str, run_id: Any) -> Any:
    """EXISTS: the run ``run_id`` is active and no cancel was requested."""
    runs = tables.runs
    # Spelled out, not IN (...): claim_item runs on the precompiled psycopg path, which
    # can't expand a list parameter.
    return exists().where(
        runs.c.namespace == namespace,
        runs.c.id == run_id,
        or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
        runs.c.cancel_requested == false(),
    )


def claim_update(tables: Tables, namespace: str, now: Any, where: Any, active: Any) -> Any:
    """Claim the items ``where`` selects: pending and dispatched ones, or running ones
    whose lease expired (a recovery, not an attempt). An item of a run that is not
    ``active`` becomes "cancelled" instead. Returns (item, status, name, input, attempts)."""
    items = tables.items
    lost = items.c.status == "running"
    run_active = active
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
        # Typed: psycopg sends a small int as a smallint, and first + count past 32,767
        # would overflow one.
        first: Any = bindparam("p_first", type_=Integer)
        in_batch = and_(
            items.c.namespace == namespace,
            items.c.run_id == bindparam("p_run_id"),
            items.c.idx == bindparam("p_idx"),
            items.c.item >= first,
            items.c.item < first + bindparam("p_count", type_=Integer),
        )
        # The run's state read once for the whole batch (the bind, not the row's run_id:
        # an uncorrelated EXISTS that Postgres evaluates once, not six times a row).
        active = run_active(tables, namespace, bindparam("p_run_id"))
        free = not_run_open(namespace, items, self.dialect)
        self.claim_batch = claim_update(tables, namespace, self.now, and_(in_batch, free), active)
        # Postgres: the claimed rows as one JSON array in one row, so that the claim takes
        # the hot path's precompiled statement (``db.one``), not SQLAlchemy's per-execute work.
        self.claim_batch_rows: Any = None
        if self.dialect.writes_in_ctes:
            got = self.claim_batch.cte("claimed")
            row = func.json_build_array(*got.c)
            self.claim_batch_rows = select(func.json_agg(row))
        held = and_(in_batch, items.c.status == "running", items.c.owner == bindparam("p_owner"))
        # Between items: those still held (not revoked, not taken over), and whether the
        # run may go on; read at most once a poll interval.
        self.check_batch_items = select(items.c.item).where(held)
        self.check_batch_run = select(runs.c.id).where(
            self.run_is,
            or_(*(runs.c.status == status for status in ACTIVE_STATUSES)),
            runs.c.cancel_requested == false(),
        )
        self._settle()
        self._open(in_batch, active)
        # The run was cancelled (or is over) mid-batch: the items not run yet never run,
        # as a cancelled run's pending items.
        self.cancel_batch_rest = self._cancel_rest(held)

    def _cancel_rest(self, rest: Any) -> Any:
        """UPDATE: the items ``rest`` selects, not run yet, are "cancelled" with their run."""
        return (
            update(self.tables.items)
            .where(rest)
            .values(
                status="cancelled",
                error=literal(RUN_OVER),
                owner=None,
                due_at=None,
                finished_at=self.now,
            )
        )

    def _settle(self) -> None:
        """Postgres: a batch's outcomes (ok, error, or a retry) in one UPDATE fed by one
        JSON parameter; the numbers of the items it recorded, as one array. A claimed
        batch's, fenced by its token, and an open batch's (its first delivery), whose items
        are still pending and count their attempt as they are recorded."""
        self.settle_batch: Any = None
        self.settle_open_batch: Any = None
        if not self.dialect.writes_in_ctes:
            return  # SQLite records them one statement each, in one transaction
        items = self.tables.items
        claimed = and_(items.c.status == "running", items.c.owner == bindparam("p_owner"))
        self.settle_batch = self._settle_outcomes(claimed, items.c.attempts)
        still_open = and_(items.c.status == "pending", items.c.finished_at.is_(None))
        self.settle_open_batch = self._settle_outcomes(still_open, items.c.attempts + 1)

    def _settle_outcomes(self, holds: Any, attempts: Any) -> Any:
        items, now = self.tables.items, self.now
        done = (
            func.json_to_recordset(cast(bindparam("p_outcomes", type_=Text), JSON))
            .table_valued(*(column(name, type_) for name, type_ in OUTCOME_COLUMNS))
            .render_derived(name="outcomes", with_types=True)
        )
        retry = done.c.status == "retry"
        settled = (
            update(items)
            .where(
                items.c.namespace == self.namespace,
                items.c.run_id == bindparam("p_run_id"),
                items.c.idx == bindparam("p_idx"),
                items.c.item == done.c.item,
                holds,
            )
            .values(
                # As retry_item: back to pending, due after the backoff, for the sweeper.
                status=case((retry, "pending"), else_=done.c.status),
                output=case((retry, None), else_=done.c.output),
                error=done.c.error,
                owner=None,
                attempts=attempts,
                dispatches=case((retry, 0), else_=items.c.dispatches),
                due_at=case((retry, now + done.c.delay), else_=None),
                finished_at=case((retry, None), else_=now),
            )
            .returning(items.c.item)
            .cte("settled")
        )
        return select(func.array_agg(settled.c.item))

    def _open(self, in_batch: Any, active: Any) -> None:
        """Postgres: a batch's first delivery in one open transaction, as an item's (see
        ``fanout/open_batch.py``): each item's advisory lock taken and the items read in
        one statement, the rest cancelled or turned into a claim before it commits."""
        self.open_batch: Any = None
        self.check_open_batch_items: Any = None
        if not self.dialect.advisory_locks:
            return
        items, now, namespace = self.tables.items, self.now, self.namespace
        # A CTE, so that each row's lock is tried exactly once (a volatile function keeps
        # Postgres from folding it into the aggregate).
        rows = (
            select(
                items.c.item,
                item_lock(namespace, items.c.run_id, items.c.idx, items.c.item).label("locked"),
                first_delivery(items).label("first"),
                items.c.name,
                items.c.input,
            )
            .where(in_batch)
            .cte("batch_rows")
        )
        self.open_batch = select(
            func.count().label("found"),
            func.bool_and(and_(rows.c.locked, rows.c.first)).label("runnable"),
            active.label("run_active"),
            func.json_agg(func.json_build_array(rows.c.item, rows.c.name, rows.c.input)).label(
                "claims"
            ),
        ).select_from(rows)
        still_open = and_(
            in_batch,
            items.c.status == "pending",
            items.c.finished_at.is_(None),
            items.c.dispatches > 0,  # not an item whose retry this transaction recorded
        )
        self.check_open_batch_items = select(items.c.item).where(still_open)
        self.cancel_open_batch_rest = self._cancel_rest(still_open)
        # Past a lease beat: the items not run yet become a claimed batch's (a claim's
        # attempt, owner and lease), so the transaction can commit.
        converted = convert_to_claim(items, now, still_open).cte("converted")
        self.convert_open_batch = select(func.array_agg(converted.c.item))
