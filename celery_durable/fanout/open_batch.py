"""A batch's first delivery in one transaction (Postgres): open, run, record, commit.

As an item's first delivery (``fanout/open_item.py``): the transaction that records the
batch opens before its first item runs and takes each item's transaction-level advisory
lock, in the statement that reads the items. Those locks are the batch's lease: every
other claimant only tries them, and Postgres drops them with the worker's connection. The
claim's write of every item row (and its commit) is saved, so each item row is written
once, by its record; the record, the parent's wake-up and the commit go in one round trip.

A batch that runs past a lease beat records what it ran and turns the rest into a claimed
batch's items (owner, lease, attempt) in the same commit, and goes on as a claimed batch.
A batch of more than ``MOST_ITEMS_OPEN`` items is claimed from the start: Postgres
sizes its lock table for ``max_locks_per_transaction`` (64 by default) locks per session.

Example::

    opened = FANOUT.of(store).open_batch("r1", 3, 100, 50)
    if opened.claims:
        written = opened.settle([Settled(100, "ok", "1")], grace=60)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery_durable.fanout.batch_statements import outcomes_param
from celery_durable.store.records import BatchWrite, DueRun, ItemClaim, Settled
from celery_durable.store.sql.build import params

if TYPE_CHECKING:
    from celery_durable.fanout.statements import FanoutStatements
    from celery_durable.store.db.connections import Connections

# The most items a batch runs in an open transaction, one advisory lock each.
MOST_ITEMS_OPEN = 64


class OpenBatch:
    """A batch's open transaction, from ``BatchOps.open_batch``. ``claims``: the
    items to run, in order, all of the batch's (empty: take the claimed path). Only an
    open batch holds a connection; ``abandon`` gives it back without writing."""

    def __init__(
        self, sql: FanoutStatements, db: Connections, key: tuple[str, int, int, int]
    ) -> None:
        self.sql, self.db, self.key = sql, db, key
        self.claims: list[tuple[int, ItemClaim]] = []
        self._record: Any = None

    @property
    def is_open(self) -> bool:
        return self._record is not None

    def _values(self, **extra: Any) -> dict[str, Any]:
        run_id, idx, first, count = self.key
        return params(run_id=run_id, idx=idx, first=first, count=count, **extra)

    def begin(self) -> None:
        """Open the transaction, lock and read the items (one round trip). Claims them
        only if every item of the batch is at its first delivery and the run is active."""
        self._record = self.db.pool.take()
        try:
            statements = [("BEGIN", {}), (self.sql.batches.open_batch, self._values())]
            row = self.db.pipeline(self._record, statements)[1]
        except BaseException:
            self._close()
            raise
        if row is None or not row.runnable or not row.run_active or row.found != self.key[3]:
            self._close()
            return
        self.claims = sorted(
            (item, ItemClaim("running", name, input_, 1)) for item, name, input_ in row.claims
        )

    def settle(
        self,
        outcomes: Sequence[Settled],
        grace: float,
        *,
        cancel_rest: bool = False,
        convert: tuple[str, float] | None = None,
    ) -> tuple[BatchWrite, list[int]]:
        """Record ``outcomes``, then cancel the items not run yet (``cancel_rest``: the run
        is cancelled or over) or make them ``convert``'s (owner, lease) claimed items, wake
        the parent if it waited for these last items, and commit. Returns what was written
        and the items converted."""
        items, batch = self.sql.items, self.sql.batches
        base = self._values(grace=grace)
        statements: list[tuple[Any, dict[str, Any]]] = [(items.settle_item_lock_run, base)]
        settled = converts = None  # where their rows come back
        if outcomes:
            settled = len(statements)
            statements.append((batch.settle_open_batch, {**base, **outcomes_param(outcomes)}))
        if cancel_rest:
            statements.append((batch.cancel_open_batch_rest, base))
        elif convert is not None:
            owner, lease = convert
            converts = len(statements)
            statements.append(
                (batch.convert_open_batch, {**base, **params(owner=owner, lease=lease)})
            )
        wakes = len(statements)
        statements += [(items.settle_item_wake, base), ("COMMIT", {})]
        try:
            rows = self.db.pipeline(self._record, statements)
        finally:
            self._close()
        recorded = [] if settled is None else sorted(rows[settled][0] or [])
        converted = [] if converts is None else sorted(rows[converts][0] or [])
        wake = rows[wakes]
        return BatchWrite(recorded, None if wake is None else DueRun(*wake)), converted

    def abandon(self) -> None:
        """Give the batch back unwritten (a crash of the task itself)."""
        self._close()

    def _close(self) -> None:
        record, self._record = self._record, None
        if record is not None:
            self.db.give_back(record)
