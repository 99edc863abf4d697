"""The fanout area's operations on batched items (``cd.map(..., batch_size=K)``). Mixed
into ``FanoutArea`` (``store.fanout``); the SQL is in ``fanout/batch_statements.py`` (the
claim) and ``fanout/item_statements.py`` (each item's record, as an item task's). A
batch's first delivery runs in one open transaction instead (``open_batch.py``).

A batch task claims its consecutive items in one statement, under one claim token, runs
them in order, and records what it ran in one transaction: the run's row locked first, as
for every item write, then each item's outcome (or retry), then the parent's wake-up.

Example::

    items = FANOUT.of(store)
    claims = items.claim_batch("r1", 3, 100, 50, owner="host:42:ab12:1", lease=30)
    written = items.settle_batch("r1", 3, "host:42:ab12:1", [Settled(100, "ok", "1")], 60)
    if written.woken: publish(written.woken)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_durable.fanout.batch_statements import outcomes_param
from celery_durable.fanout.open_batch import MOST_ITEMS_OPEN, OpenBatch
from celery_durable.fanout.statements import FanoutStatements
from celery_durable.store.db.connections import Connections
from celery_durable.store.records import BatchWrite, DueRun, ItemClaim, Settled
from celery_durable.store.sql.build import params


class BatchOps:
    """Claim, check and record the items of a batch task."""

    db: Connections
    sql: FanoutStatements

    def open_batch(self, run_id: str, idx: int, first: int, count: int) -> OpenBatch:
        """A batch's first delivery, in one transaction (Postgres, at most
        ``MOST_ITEMS_OPEN`` items; see ``open_batch``): its ``claims`` are the items to
        run; none: take ``claim_batch``."""
        opened = OpenBatch(self.sql, self.db, (run_id, idx, first, count))
        if self.sql.batches.open_batch is not None and count <= MOST_ITEMS_OPEN:
            opened.begin()  # Postgres: its advisory locks
        return opened

    def claim_batch(
        self,
        run_id: str,
        idx: int,
        first: int,
        count: int,
        owner: str,
        lease: float,
        max_recoveries: int = 10,
    ) -> list[tuple[int, ItemClaim]]:
        """Claim the items ``first`` to ``first + count - 1`` that can run (as
        ``claim_item``, each "running" or "cancelled"), in item order; the others are
        recorded already, running elsewhere or waiting out a retry backoff."""
        values = params(
            run_id=run_id,
            idx=idx,
            first=first,
            count=count,
            owner=owner,
            lease=lease,
            max_recoveries=max_recoveries,
        )
        sql = self.sql.batches
        if sql.claim_batch_rows is not None:
            # Asynchronous commit, like claim_item: the record's commit flushes it.
            got = self.db.one(sql.claim_batch_rows, values, relaxed=True)
            rows = (got[0] if got else None) or []  # psycopg decodes the JSON
        else:
            with self.db.write() as conn:
                rows = conn.execute(sql.claim_batch, values).all()
        return sorted((row[0], ItemClaim(*row[1:])) for row in rows)

    def check_batch(
        self, run_id: str, idx: int, first: int, count: int, owner: str | None
    ) -> tuple[bool, set[int]]:
        """Whether the run may go on (active, no cancel requested), and which of the
        batch's items ``owner`` still holds (a revoke or a takeover ends a hold); with no
        ``owner``, an open batch's, those still unsettled (a revoke settles them)."""
        values = params(run_id=run_id, idx=idx, first=first, count=count, owner=owner)
        sql = self.sql.batches
        held_items = sql.check_batch_items if owner is not None else sql.check_open_batch_items
        with self.db.read() as conn:
            active = conn.execute(sql.check_batch_run, values).first() is not None
            held = {row[0] for row in conn.execute(held_items, values)}
        return active, held

    def settle_batch(
        self,
        run_id: str,
        idx: int,
        owner: str,
        outcomes: Sequence[Settled],
        grace: float,
        cancel_rest: tuple[int, int] | None = None,
    ) -> BatchWrite:
        """Record ``outcomes`` in one transaction, each only while ``owner`` still holds
        its item (the first writer wins), and wake the parent if it waited for these last
        items. ``cancel_rest`` (first, count): the run is cancelled or over, so the items
        of that range still held are settled "cancelled" too."""
        items, batch = self.sql.items, self.sql.batches
        base = params(run_id=run_id, idx=idx, owner=owner, grace=grace)
        statements: list[tuple[Any, dict[str, Any]]] = [(items.settle_item_lock_run, base)]
        one_statement = batch.settle_batch is not None and bool(outcomes)
        if one_statement:
            statements.append((batch.settle_batch, {**base, **outcomes_param(outcomes)}))
        else:
            statements.extend(self._settle_one_by_one(base, outcomes))
        if cancel_rest is not None:
            first, count = cancel_rest
            rest = {**base, **params(first=first, count=count)}
            statements.append((batch.cancel_batch_rest, rest))
        statements.append((items.settle_item_wake, base))
        if self.db.is_postgres:
            # One round trip: the lock, the records, the wake-up and the commit.
            rows = self.db.transaction_pipeline(statements)
        else:
            with self.db.transaction() as conn:
                results = [conn.execute(stmt, values) for stmt, values in statements]
                rows = [r.first() if r.returns_rows else None for r in results]
        if one_statement:
            recorded = sorted(rows[1][0] or [])
        else:
            recorded = [done.item for done, row in zip(outcomes, rows[1:], strict=False) if row]
        wake = rows[-1]
        return BatchWrite(recorded, None if wake is None else DueRun(*wake))

    def _settle_one_by_one(
        self, base: dict[str, Any], outcomes: Sequence[Settled]
    ) -> list[tuple[Any, dict[str, Any]]]:
        """SQLite: each outcome as an item task records it (settle_item or retry_item)."""
        items = self.sql.items
        statements: list[tuple[Any, dict[str, Any]]] = []
        for done in outcomes:
            values = {**base, **params(item=done.item, error=done.error)}
            if done.status == "retry":
                statements.append((items.retry_item, {**values, **params(delay=done.delay)}))
            else:
                values.update(params(status=done.status, output=done.output))
                statements.append((items.settle_item, values))
        return statements
