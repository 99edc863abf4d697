"""The fanout area's operations on items: the sub-records of fan-out steps (parallel
items, remote steps, children). Mixed into ``FanoutArea`` (``store.fanout``); the SQL is
in ``item_statements``.

Every write that can settle an item locks the parent run's row first, then writes the
item, then wakes the run if it waits and nothing it awaits is left: two last items can't
both miss the wake-up, and a body suspending at that moment sees the item settled.

Example::

    items = FANOUT.of(store)
    claim = items.claim_item("r1", 3, 17, owner="host:42:ab12:1", lease=30)
    written = items.settle_item("r1", 3, 17, "host:42:ab12:1", "ok", "42", None, grace=60)
    if written.woken: publish(written.woken)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection

from celery_durable.fanout.open_item import CLAIM, OpenItem
from celery_durable.fanout.statements import FanoutStatements
from celery_durable.store.db.connections import Connections
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import (
    ITEM_FAILED,
    DueItem,
    DueRun,
    FanOut,
    FanOutState,
    ItemClaim,
    ItemFailure,
    ItemRow,
    ItemWrite,
    LostItem,
    Outcome,
    StepRecord,
    StepWrite,
)
from celery_durable.store.sql.build import TAKEOVER, hold_run, params, step_params

# Items per round: an INSERT of a fan-out's rows where each row is a parameter set (an
# executemany), and a publishing loop of the caller.
ITEMS_PER_ROUND = 500


# Postgres: a fan-out's rows go in one statement per this many items or input bytes
# (whichever comes first), so that one JSON parameter stays a few MiB however big the map.
ROWS_PER_INSERT = 20_000
BYTES_PER_INSERT = 8 << 20


def _insert_rounds(inputs: Sequence[str]) -> Iterator[tuple[int, Sequence[str]]]:
    """(first item, its inputs) of each INSERT of a fan-out's rows, in item order."""
    first = size = 0
    for at, text in enumerate(inputs):
        size += len(text)
        if at - first + 1 >= ROWS_PER_INSERT or size >= BYTES_PER_INSERT:
            yield first, inputs[first : at + 1]
            first, size = at + 1, 0
    if first < len(inputs):
        yield first, inputs[first:]


def _batch_column(batch_size: int) -> int | None:
    """``items.batch_size``: NULL for one task per item, as rows from before 0012 read."""
    return batch_size if batch_size > 1 else None


class _ChildIdTaken(Exception):
    """Internal: rolls the fan-out's insert transaction back when a child's id is taken."""


class ItemOps:
    """Insert, claim, record and sweep items; wake the parent that waits for them."""

    db: Connections
    sql: FanoutStatements
    dialect: Dialect

    # -- the parent body ------------------------------------------------------------------

    def insert_fanout(
        self,
        run_id: str,
        fence: int,
        step: StepRecord,
        fan: FanOut,
        carried: Sequence[StepRecord] = (),
    ) -> StepWrite:
        """Record the fan-out step ("started") and insert its items (or its child run),
        in one transaction, while this worker holds the run: RECORDED, EXISTS (an earlier
        write committed; its row is returned), DUPLICATE (the child's id is taken),
        LEASE_LOST or CANCELLED. The caller publishes the items once this returns."""
        sql = self.sql.items
        values = params(run_id=run_id, fence=fence, idx=step.idx, name=step.name, input=step.input)
        try:
            with self.db.transaction() as conn:
                refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
                if refused is not None:
                    return StepWrite(refused)
                if conn.execute(sql.insert_fanout_step, values).first() is None:
                    stored = conn.execute(self.sql.steps.get_step, values).first()
                    return StepWrite(Outcome.EXISTS, StepRecord(*stored) if stored else None)
                if fan.child is not None:
                    self._insert_child(conn, run_id, step.idx, fan)
                else:
                    self._insert_items(conn, run_id, step.idx, fan)
        except _ChildIdTaken:
            return StepWrite(Outcome.DUPLICATE)
        return StepWrite(Outcome.RECORDED)

    def _insert_items(self, conn: Connection, run_id: str, idx: int, fan: FanOut) -> None:
        rows = self.sql.items.insert_fanout_rows
        if rows is not None:
            base = params(
                run_id=run_id,
                idx=idx,
                name=fan.name,
                queue=fan.queue,
                grace=fan.grace,
                batch_size=_batch_column(fan.batch_size),
            )
            for first, inputs in _insert_rounds(fan.inputs):
                values = params(first=first, inputs=json.dumps(inputs, ensure_ascii=False))
                conn.execute(rows, {**base, **values})
            return
        for start in range(0, len(fan.inputs), ITEMS_PER_ROUND):
            batch = fan.inputs[start : start + ITEMS_PER_ROUND]
            conn.execute(
                self.sql.items.insert_fanout_items,
                [
                    params(
                        run_id=run_id,
                        idx=idx,
                        item=start + offset,
                        name=fan.name,
                        queue=fan.queue,
                        input=text,
                        grace=fan.grace,
                        batch_size=_batch_column(fan.batch_size),
                    )
                    for offset, text in enumerate(batch)
                ],
            )

    def _insert_child(self, conn: Connection, run_id: str, idx: int, fan: FanOut) -> None:
        child = fan.child
        assert child is not None
        inserted = conn.execute(
            self.sql.runs.insert_child_run,
            params(
                id=child.id,
                name=child.name,
                queue=child.queue,
                args=child.args,
                max_attempts=child.max_attempts,
                retry_backoff=child.retry_backoff,
                grace=child.dispatch_grace,
                start_delay=child.start_delay,
                parent_id=run_id,
                parent_idx=idx,
                canvas=child.canvas,
                priority=child.priority or None,
                dedup_key=child.dedup_key,
                timeout=child.timeout,
            ),
        ).first()
        if inserted is None:
            raise _ChildIdTaken(child.id)
        conn.execute(
            self.sql.items.insert_fanout_child,
            params(
                run_id=run_id,
                idx=idx,
                item=0,
                name=fan.name,
                queue=None,
                input=fan.inputs[0],
                child_id=child.id,
                detached=fan.detached,
            ),
        )

    def load_items(self, run_id: str, idxs: Iterable[int]) -> dict[int, FanOutState]:
        """The items of these fan-out steps, in one query; raw outputs, no per-item objects."""
        states: dict[int, FanOutState] = {}
        with self.db.read() as conn:
            rows = conn.execute(self.sql.items.load_items, params(run_id=run_id, idxs=list(idxs)))
            for idx, item, status, output, error, child_id in rows:
                state = states.get(idx)
                if state is None:
                    state = states[idx] = FanOutState([], {}, 0)
                state.outputs.append(output if status == "ok" else None)
                if status in ITEM_FAILED:
                    state.failures[item] = ItemFailure(status, error)
                elif status != "ok":
                    state.unsettled += 1
                if child_id is not None:
                    state.child_id = child_id
        return states

    def suspend_on_items(
        self,
        run_id: str,
        fence: int,
        idxs: Sequence[int],
        wake_at: float | None = None,
        step: StepRecord | None = None,
        carried: Sequence[StepRecord] = (),
    ) -> Outcome:
        """Release the run as WAITING until every unsettled item of ``idxs`` has settled
        (or ``wake_at``): SUSPENDED, SETTLED (nothing left to wait for: go on),
        LEASE_LOST or CANCELLED. ``step``: a waiting step recorded in the same transaction.
        """
        sql = self.sql.items
        values = params(run_id=run_id, fence=fence, idxs=list(idxs))
        with self.db.transaction() as conn:
            # FOR UPDATE: items settling now wait for this transaction, then see WAITING.
            refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
            if refused is not None:
                return refused
            conn.execute(sql.suspend_on_items_forget, values)
            conn.execute(sql.suspend_on_items_await, values)
            if conn.execute(sql.suspend_on_items_open, values).first() is None:
                return Outcome.SETTLED
            if step is not None:
                conn.execute(self.sql.steps.record_step, step_params(run_id, fence, step))
            conn.execute(sql.suspend_on_items, params(run_id=run_id, fence=fence, wake_at=wake_at))
            return Outcome.SUSPENDED

    # -- the item task --------------------------------------------------------------------

    def open_item(self, run_id: str, idx: int, item: int) -> OpenItem:
        """An item's first delivery, in one transaction (Postgres; see ``open_items``):
        its ``verdict`` says whether to run it here, skip it, or take ``claim_item``."""
        opened = OpenItem(self, self.db, (run_id, idx, item), CLAIM)
        if self.dialect.advisory_locks:
            opened.begin()
        return opened

    def claim_item(
        self, run_id: str, idx: int, item: int, owner: str, lease: float, max_recoveries: int = 10
    ) -> ItemClaim | None:
        """Take a dispatched pending item, or a running one whose lease expired. Its run
        being cancelled or over makes it "cancelled" instead. None: nothing to run (already
        recorded, running elsewhere, waiting out a retry backoff, or unknown)."""
        # Asynchronous commit, like claim_run: the item's record (a synchronous commit)
        # flushes the claim with it; a claim lost in a database crash leaves the item as
        # it was, and its unique token matches nothing (the outcome is then not recorded,
        # and the item runs again).
        row = self.db.one(
            self.sql.items.claim_item,
            params(
                run_id=run_id,
                idx=idx,
                item=item,
                owner=owner,
                lease=lease,
                max_recoveries=max_recoveries,
            ),
            relaxed=True,
        )
        return None if row is None else ItemClaim(*row[1:])  # row[0]: the item number

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
    ) -> ItemWrite:
        """Record an item's output ("ok") or final error ("error") if ``owner`` still holds
        it: the first writer wins. Wakes the parent if it waited for this last item."""
        sql = self.sql.items
        values = params(
            run_id=run_id,
            idx=idx,
            item=item,
            owner=owner,
            status=status,
            output=output,
            error=error,
            grace=grace,
        )
        with self.db.transaction() as conn:
            run = conn.execute(sql.settle_item_lock_run, values).first()
            written = conn.execute(sql.settle_item, values).first()
            if written is None:
                return ItemWrite(Outcome.LEASE_LOST)
            return ItemWrite(Outcome.RECORDED, self._wake_on(conn, run, written.awaited, values))

    def revoke_item(
        self, run_id: str, idx: int, item: int, error: str, grace: float
    ) -> ItemWrite | None:
        """Settle an unsettled item "revoked" with ``error`` (its task id was revoked),
        whether pending or running: no delivery of it runs or records it afterwards.
        Wakes the parent if it waited for this last item. None: no such unsettled item."""
        sql = self.sql.items
        values = params(run_id=run_id, idx=idx, item=item, error=error, grace=grace)
        with self.db.transaction() as conn:
            run = conn.execute(sql.settle_item_lock_run, values).first()
            written = conn.execute(sql.revoke_item, values).first()
            if written is None:
                return None
            return ItemWrite(Outcome.RECORDED, self._wake_on(conn, run, written.awaited, values))

    def _wake_on(
        self, conn: Connection, run: Any, awaited: bool, values: dict[str, Any]
    ) -> DueRun | None:
        """Wake the (locked) run if it waits for items and none it awaits is left."""
        if not awaited or run is None or run.status != "WAITING" or not run.wait_items:
            return None
        row = conn.execute(self.sql.items.settle_item_wake, values).first()
        return None if row is None else DueRun(*row)

    def retry_item(
        self, run_id: str, idx: int, item: int, owner: str, delay: float, error: str
    ) -> bool:
        """Back to pending after a retryable failure; the sweeper publishes it after
        ``delay``. False when ``owner`` no longer holds the item."""
        values = params(run_id=run_id, idx=idx, item=item, owner=owner, delay=delay, error=error)
        with self.db.write() as conn:
            return conn.execute(self.sql.items.retry_item, values).first() is not None

    def count_item_attempt(self, run_id: str, idx: int, item: int, owner: str, error: str) -> bool:
        """One more attempt of a held item that retries in-process (eager mode), after the
        failure ``error``. False when ``owner`` no longer holds the item."""
        values = params(run_id=run_id, idx=idx, item=item, owner=owner, error=error)
        with self.db.write() as conn:
            return conn.execute(self.sql.items.count_item_attempt, values).rowcount > 0

    def renew_item_leases(self, held: Sequence[tuple[str, int, int, str]], lease: float) -> int:
        """Renew the leases of the items a process runs: (run_id, idx, item, owner)."""
        renewed = 0
        with self.db.write() as conn:
            for run_id, idx, item, owner in held:
                values = params(run_id=run_id, idx=idx, item=item, owner=owner, lease=lease)
                renewed += conn.execute(self.sql.items.renew_item_lease, values).rowcount
        return renewed

    def release_items(self, held: Sequence[tuple[str, int, int, str]]) -> int:
        """Give back the items of an exiting process: pending and due at once."""
        released = 0
        with self.db.write() as conn:
            for run_id, idx, item, owner in held:
                values = params(run_id=run_id, idx=idx, item=item, owner=owner)
                released += conn.execute(self.sql.items.release_item, values).rowcount
        return released

    # -- the sweeper ----------------------------------------------------------------------

    def sweep_due_items(
        self,
        limit: int,
        grace: float,
        names: Sequence[str],
        max_recoveries: int = 10,
        takeover: float = TAKEOVER,
    ) -> list[DueItem]:
        """Take the due items of the steps ``names`` for the sweeper to publish again: a
        lost publish, an expired lease (a recovery) or a retry whose backoff is over. Only
        items of runs of this store's broker, unless overdue by ``takeover`` seconds (as
        ``sweep_due_runs``)."""
        values = params(
            limit=limit,
            grace=grace,
            names=list(names),
            max_recoveries=max_recoveries,
            takeover=takeover,
        )
        with self.db.write() as conn:
            return [DueItem(*r) for r in conn.execute(self.sql.items.sweep_due_items, values)]

    def lost_items(
        self, limit: int, names: Sequence[str], max_recoveries: int, takeover: float = TAKEOVER
    ) -> list[LostItem]:
        """Running items whose worker was lost ``max_recoveries`` times (poison items)."""
        values = params(
            limit=limit, names=list(names), max_recoveries=max_recoveries, takeover=takeover
        )
        with self.db.read() as conn:
            return [LostItem(*r) for r in conn.execute(self.sql.items.lost_items, values)]

    def wake_item_waiters(self, grace: float, names: Sequence[str]) -> list[DueRun]:
        """Wake every run of the workflows ``names`` that waits for items and has none
        left unsettled (a wake-up that never happened)."""
        values = params(grace=grace, names=list(names))
        with self.db.write() as conn:
            return [DueRun(*r) for r in conn.execute(self.sql.items.wake_item_waiters, values)]

    # -- reads ----------------------------------------------------------------------------

    def list_items(self, run_id: str) -> list[ItemRow]:
        with self.db.read() as conn:
            rows = conn.execute(self.sql.items.list_items, params(run_id=run_id))
            return [ItemRow(*r) for r in rows]
