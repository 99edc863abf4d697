"""The fanout area's operations on child runs: a child's settle gives its parent's item
the outcome in the same transaction, and a cancelled run's items and children follow it.

Every write that settles a child's item locks the parent's row first, then the child's
(the order every writer keeps, so two of them never deadlock). The kernel's ``cancel_run``
calls this area's parts in its own transaction (``CANCEL_PARTICIPANT``), the engine settles
children through ``CHILD_SETTLES``.

Example::

    final, woken = FANOUT.of(store).settle_child_run(
        "child-1", fence, "SUCCEEDED", parent_id="r1", parent_idx=3, grace=60, result="42"
    )
    if woken: publish(woken)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from celery_durable.fanout.items import ItemOps
from celery_durable.store.areas import LockedParent
from celery_durable.store.records import DueRun, StepRecord
from celery_durable.store.schema import FINISHED_STATUSES
from celery_durable.store.sql.build import params
from celery_durable.store.store import Store


class ChildOps(ItemOps):
    """Settle children's items, wake their parents; a cancel's part of the run tree."""

    store: Store

    def settle_child_run(
        self,
        run_id: str,
        fence: int,
        status: str,
        *,
        parent_id: str,
        parent_idx: int,
        grace: float,
        result: str | None = None,
        error: str | None = None,
        step: StepRecord | None = None,
        carried: Sequence[StepRecord] = (),
    ) -> tuple[str | None, DueRun | None]:
        """``settle_run`` for a child run: in the same transaction its parent's item takes
        its outcome, and the parent wakes if it waited for nothing else. Returns the final
        status (None: lease lost) and the woken parent, for the caller to publish.

        The parent's row is locked before the child's (the order every writer keeps)."""
        assert status in FINISHED_STATUSES
        values = params(run_id=run_id, fence=fence, status=status, result=result, error=error)
        with self.db.transaction() as conn:
            parent = conn.execute(
                self.sql.items.settle_item_lock_run, params(run_id=parent_id)
            ).first()
            final = self.store.settle_on(conn, run_id, fence, values, step, carried)
            if final is None:
                return None, None
            return final, self.settle_child_item_on(
                conn, parent, parent_id, parent_idx, run_id, grace
            )

    def settle_child_item(
        self, parent_id: str, parent_idx: int, child_id: str, grace: float
    ) -> DueRun | None:
        """Copy a finished child's outcome into its parent's item; wake the parent if that
        was the last item it waited for (returned, to publish)."""
        with self.db.transaction() as conn:
            parent = conn.execute(
                self.sql.items.settle_item_lock_run, params(run_id=parent_id)
            ).first()
            return self.settle_child_item_on(conn, parent, parent_id, parent_idx, child_id, grace)

    def settle_child_item_on(
        self,
        conn: Connection,
        parent: Any,
        parent_id: str,
        parent_idx: int,
        child_id: str,
        grace: float,
    ) -> DueRun | None:
        """``settle_child_item`` in the caller's transaction, the parent's row (``parent``)
        already locked."""
        values = params(run_id=parent_id, idx=parent_idx, item=0, child_id=child_id, grace=grace)
        written = conn.execute(self.sql.items.settle_child_item, values).first()
        if written is None:
            return None
        return self._wake_on(conn, parent, written.awaited, values)

    def orphaned_children(self, limit: int) -> list[tuple[str, int, str]]:
        """(parent id, step index, child id) of finished children whose parent's item is
        still open: their settling transaction never ran (a crash in between)."""
        with self.db.read() as conn:
            rows = conn.execute(self.sql.items.orphaned_children, params(limit=limit))
            return [(r.run_id, r.idx, r.child_id) for r in rows]

    # -- the kernel's cancel_run, in its transaction ---------------------------------------

    def lock_parent(self, conn: Connection, values: dict[str, Any]) -> LockedParent | None:
        """The run's parent, its row locked (None: a top-level run)."""
        link = conn.execute(self.sql.items.get_parent, values).first()
        if link is None or link.parent_id is None:
            return None
        lock = self.sql.items.settle_item_lock_run
        row = conn.execute(lock, params(run_id=link.parent_id)).first()
        return LockedParent(link.parent_id, link.parent_idx, row)

    def cancel_items(self, conn: Connection, values: dict[str, Any]) -> None:
        """The run's pending items never run: cancelled with it."""
        conn.execute(self.sql.items.cancel_run_items, values)

    def settle_parent_item(
        self, conn: Connection, parent: LockedParent, run_id: str, grace: float
    ) -> DueRun | None:
        """The cancelled run's item in its (locked) parent; the parent, if it woke."""
        if parent.idx is None:
            return None
        return self.settle_child_item_on(conn, parent.row, parent.run_id, parent.idx, run_id, grace)

    def children_to_cancel(self, conn: Connection, values: dict[str, Any]) -> list[str]:
        """The run's unfinished children (not detached ones), cancelled after it."""
        return [r.child_id for r in conn.execute(self.sql.items.cancel_run_children, values)]
