"""An item's first delivery in one transaction (Postgres): open, run, record, commit.

A claimed item costs two commits: the claim (a lease, so that nobody else runs it and the
sweeper can tell a lost worker) and the record. On its first delivery an item needs
neither: the transaction that will record it opens before the step runs and takes a
transaction-level advisory lock on the item. That lock is the lease: every other
claimant (a duplicate delivery, the claimed path, the sweeper) only *tries* it and goes
away, and Postgres drops it the moment the worker's connection dies, so a SIGKILLed item is
free again at once. The record, the parent's wake-up and the commit then travel in one
pipelined round trip: one commit per item.

The transaction stays open while the step runs (idle in transaction, with no snapshot and
no transaction id until the record). A step that runs longer than a lease beat is
*converted* by the lease heartbeat: it writes the usual claim (owner, lease, attempt) and
commits, and the item goes on as a claimed one.

Redeliveries, re-dispatches and retries take the claimed path (``ItemOps.claim_item``),
which counts attempts and recoveries: a poison item is still found and failed.

Example::

    opened = FANOUT.of(store).open_item("r1", 3, 17)
    if opened.verdict == "run":
        written = opened.settle("ok", "42", None, grace=60)
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from celery_durable.store.records import DueRun, ItemClaim, ItemWrite, Outcome
from celery_durable.store.sql.build import params

if TYPE_CHECKING:
    from celery_durable.fanout.statements import FanoutStatements
    from celery_durable.store.db.connections import Connections


class ItemSettling(Protocol):
    """What an open item falls back on, the claimed path's writes (``ItemOps``, which
    opens items, implements it: named here so this module needn't import that one)."""

    sql: FanoutStatements

    def settle_item(
        self,
        run_id: str,
        idx: int,
        item: int,
        owner: str,
        status: str,
        output: str | None,
        error: str | None,
        grace: float,
    ) -> ItemWrite: ...

    def retry_item(
        self, run_id: str, idx: int, item: int, owner: str, delay: float, error: str
    ) -> bool: ...


# What ``open_item`` found: run it here, nothing to run, or take the claimed path.
RUN, SKIP, CLAIM = "run", "skip", "claim"


class OpenItem:
    """An item's open transaction, from ``ItemOps.open_item``.

    ``verdict``: RUN (run ``claim``'s step, then ``settle`` or ``retry``), SKIP (recorded,
    running elsewhere or unknown: nothing to do) or CLAIM (take the claimed path). Only a
    RUN holds a connection; ``abandon`` gives it back without writing.
    """

    def __init__(
        self, store: ItemSettling, db: Connections, key: tuple[str, int, int], verdict: str
    ) -> None:
        self.store, self.db, self.key, self.verdict = store, db, key, verdict
        self.claim: ItemClaim | None = None
        self.owner: str | None = None  # set when the heartbeat converted it to a claim
        self._record: Any = None
        self._lock = threading.Lock()

    @property
    def values(self) -> dict[str, Any]:
        run_id, idx, item = self.key
        return params(run_id=run_id, idx=idx, item=item)

    def begin(self) -> None:
        """Open the transaction, take the item's lock and read it (one round trip)."""
        sql = self.store.sql.open_items
        self._record = self.db.pool.take()
        try:
            results = self.db.pipeline(self._record, [("BEGIN", {}), (sql.open_item, self.values)])
            row = results[1]
        except BaseException:
            self._close()
            raise
        if row is None or not row.locked or row.finished:
            self.verdict = SKIP
        elif not row.first or not row.run_active:
            self.verdict = CLAIM
        else:
            self.verdict = RUN
            self.claim = ItemClaim("running", row.name, row.input, 1)
            return
        self._close()

    def settle(self, status: str, output: str | None, error: str | None, grace: float) -> ItemWrite:
        """Record the outcome, wake the parent if it waited for this last item, commit."""
        with self._lock:
            if self.owner is not None:
                run_id, idx, item = self.key
                return self.store.settle_item(
                    run_id, idx, item, self.owner, status, output, error, grace
                )
            sql = self.store.sql.items
            values = {
                **self.values,
                **params(status=status, output=output, error=error, grace=grace),
            }
            statements = [
                (sql.settle_item_lock_run, values),
                (self.store.sql.open_items.settle_open_item, values),
                (sql.settle_item_wake, values),
                ("COMMIT", {}),
            ]
            rows = self._finish(statements)
        if rows[1] is None:
            return ItemWrite(Outcome.LEASE_LOST)  # cancelled while it ran
        return ItemWrite(Outcome.RECORDED, None if rows[2] is None else DueRun(*rows[2]))

    def retry(self, delay: float, error: str) -> bool:
        """Back to pending after a retryable failure (as ``retry_item``), commit."""
        with self._lock:
            if self.owner is not None:
                run_id, idx, item = self.key
                return self.store.retry_item(run_id, idx, item, self.owner, delay, error)
            values = {**self.values, **params(delay=delay, error=error)}
            statements = [(self.store.sql.open_items.retry_open_item, values), ("COMMIT", {})]
            return self._finish(statements)[0] is not None

    def convert(self, owner: str, lease: float) -> bool:
        """From the lease heartbeat: write the claim (``owner``, a lease) and commit, so a
        long step holds a lease instead of an open transaction. False if the item is no
        longer open here (finished, or cancelled meanwhile)."""
        with self._lock:
            if self._record is None or self.owner is not None:
                return False
            values = {**self.values, **params(owner=owner, lease=lease)}
            statements = [(self.store.sql.open_items.convert_open_item, values), ("COMMIT", {})]
            converted = self._finish(statements)[0] is not None
            if converted:
                self.owner = owner
            return converted

    def abandon(self) -> None:
        """Give the item back unwritten (a cold shutdown, a crash of the task itself)."""
        with self._lock:
            if self._record is not None:
                self._close()

    def _finish(self, statements: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
        try:
            return self.db.pipeline(self._record, statements)
        finally:
            self._close()

    def _close(self) -> None:
        record, self._record = self._record, None
        if record is not None:
            self.db.give_back(record)
