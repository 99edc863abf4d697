"""The statements of items: fan-out steps' sub-records (parallel items, remote steps,
children), each named after the fanout area's method that runs
it, like those in ``statements``.

An item is unsettled exactly while ``finished_at`` is NULL; the partial index on that keeps
the wake-up check to a run's unsettled items, never its thousands of settled ones.

Example::

    sql = ItemStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.claim_item       # UPDATE ... RETURNING status, name, input, attempts
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    and_,
    bindparam,
    case,
    exists,
    false,
    literal_column,
    or_,
    select,
    true,
    tuple_,
    update,
)

from celery_durable.fanout.batch_statements import claim_update, run_active
from celery_durable.fanout.item_rows import fanout_rows
from celery_durable.fanout.open_item_statements import not_run_open
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import DueItem, ItemRow, LostItem
from celery_durable.store.schema import FINISHED_STATUSES, Tables, open_child
from celery_durable.store.sql.build import Builder, columns_of


class ItemStatements(Builder):
    """Insert, claim, record, retry, sweep and read the items of fan-out steps."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, dispatcher: str | None = None
    ) -> None:
        super().__init__(tables, dialect, namespace, dispatcher)
        items = tables.items
        self._in_ns = items.c.namespace == namespace
        self._of_run = and_(self._in_ns, items.c.run_id == bindparam("p_run_id"))
        self._key = and_(
            self._of_run, items.c.idx == bindparam("p_idx"), items.c.item == bindparam("p_item")
        )
        self._unsettled = items.c.finished_at.is_(None)
        self._awaited_open = and_(self._unsettled, items.c.awaited == true())
        self._lost = items.c.status == "running"
        # Nobody runs it in an open transaction (open_items): its lock is free.
        self._free = not_run_open(namespace, items, self.dialect)
        self._insert()
        self._wait()
        self._task()
        self._retry()
        self._sweep()
        self._children()
        self._cancel()
        self._reads()

    def _insert(self) -> None:
        """Insert a fan-out: the step row and its items (or child) in one transaction."""
        steps, items, now = self.tables.steps, self.tables.items, self.now
        namespace = self.namespace
        self.insert_fanout_step = (
            self.insert(steps)
            .values(
                namespace=namespace,
                run_id=bindparam("p_run_id"),
                idx=bindparam("p_idx"),
                name=bindparam("p_name"),
                status="started",
                input=bindparam("p_input"),
                created_at=now,
                started_at=now,
                attempt=self.run_attempt,
            )
            .on_conflict_do_nothing()
            .returning(steps.c.idx)
        )
        row = {
            "namespace": namespace,
            "run_id": bindparam("p_run_id"),
            "idx": bindparam("p_idx"),
            "item": bindparam("p_item"),
            "name": bindparam("p_name"),
            "status": "pending",
            "queue": bindparam("p_queue"),
            "input": bindparam("p_input"),
            "attempts": 0,
            "recoveries": 0,
            # Inserted as awaited: the common body gathers what it starts, so suspending
            # then changes no item rows (see suspend_on_items).
            "awaited": True,
            "created_at": now,
        }
        # Published right after the commit: dispatched once, due again after the grace.
        self.insert_fanout_items = (
            self.insert(items)
            .values(
                **row,
                dispatches=1,
                detached=False,
                due_at=now + bindparam("p_grace"),
                batch_size=bindparam("p_batch_size", type_=Integer),
            )
            .on_conflict_do_nothing()
        )
        # Postgres: the same rows, any number, in one statement fed by one JSON parameter.
        self.insert_fanout_rows = fanout_rows(self.tables, self.dialect, namespace)
        # A child's item is never dispatched: the child run is swept as a run.
        self.insert_fanout_child = (
            self.insert(items)
            .values(
                **row,
                dispatches=0,
                child_id=bindparam("p_child_id"),
                detached=bindparam("p_detached"),
                due_at=None,
            )
            .on_conflict_do_nothing()
        )

    def _wait(self) -> None:
        """The parent body: read its items, wait for them."""
        runs, items, now = self.tables.runs, self.tables.items, self.now
        of_run, unsettled = self._of_run, self._unsettled
        in_idxs = items.c.idx.in_(bindparam("p_idxs", expanding=True))
        self.load_items = (
            select(
                items.c.idx,
                items.c.item,
                items.c.status,
                items.c.output,
                items.c.error,
                items.c.child_id,
            )
            .where(of_run, in_idxs)
            .order_by(items.c.idx, items.c.item)
        )
        # The body waits for exactly these indices: older waits' flags are dropped.
        self.suspend_on_items_forget = (
            update(items).where(of_run, self._awaited_open, ~in_idxs).values(awaited=False)
        )
        self.suspend_on_items_await = (
            update(items)
            .where(of_run, unsettled, items.c.awaited == false(), in_idxs)
            .values(awaited=True)
        )
        self.suspend_on_items_open = select(items.c.item).where(of_run, self._awaited_open).limit(1)
        self.suspend_on_items = (
            update(runs)
            .where(self.run_is, runs.c.fence == bindparam("p_fence"))
            .values(
                status="WAITING",
                owner=None,
                wait_signal=None,
                wait_items=True,
                due_at=bindparam("p_wake_at", type_=runs.c.due_at.type),
                attempts=runs.c.attempts - 1,  # a suspension gives its attempt back
                dispatches=0,
                updated_at=now,
            )
        )

    def _task(self) -> None:
        """The item task: claim and record an item, wake its run."""
        runs, items, now, namespace = self.tables.runs, self.tables.items, self.now, self.namespace
        # Taking over an expired lease recovers a lost worker: not a new attempt.
        active = run_active(self.tables, namespace, items.c.run_id)
        self.claim_item = claim_update(
            self.tables, namespace, now, and_(self._key, self._free), active
        )
        # Locking the parent run row first serialises the items of one run as they settle,
        # and with the body's suspension: the last of them always sees the others.
        lock = select(runs.c.status, runs.c.wait_items).where(self.run_is)
        self.settle_item_lock_run = self.dialect.for_update(lock)
        # First writer wins: only the claim's token, only while it runs.
        self.settle_item = (
            update(items)
            .where(self._key, items.c.status == "running", items.c.owner == bindparam("p_owner"))
            .values(
                status=bindparam("p_status"),
                output=bindparam("p_output"),
                error=bindparam("p_error"),
                owner=None,
                due_at=None,
                finished_at=now,
            )
            .returning(items.c.awaited)
        )
        waits_for_open = exists().where(
            items.c.namespace == namespace, items.c.run_id == runs.c.id, self._awaited_open
        )
        wake = self.wake_waiting(runs.c.wait_items == true(), ~waits_for_open, wait_items=False)
        self.settle_item_wake = wake.where(runs.c.id == bindparam("p_run_id"))
        # The sweeper's backstop for a wake-up that never happened.
        self.wake_item_waiters = wake.where(
            runs.c.name.in_(bindparam("p_names", expanding=True)), self.here(runs.c.dispatcher)
        )

    def _retry(self) -> None:
        """The item task: retry, count an attempt, renew and release an item."""
        items, now = self.tables.items, self.now
        # A retry waits in the database (due_at), not in an ETA message; dispatches=0 keeps
        # any earlier message of the item from claiming it before the sweeper publishes it.
        self.retry_item = (
            update(items)
            .where(self._key, items.c.status == "running", items.c.owner == bindparam("p_owner"))
            .values(
                status="pending",
                owner=None,
                error=bindparam("p_error"),
                dispatches=0,
                due_at=now + bindparam("p_delay"),
            )
            .returning(items.c.item)
        )
        held = and_(self._key, items.c.status == "running", items.c.owner == bindparam("p_owner"))
        # Eager mode retries in-process, still claimed: each new attempt is counted here.
        self.count_item_attempt = (
            update(items)
            .where(held)
            .values(attempts=items.c.attempts + 1, error=bindparam("p_error"))
        )
        self.renew_item_lease = update(items).where(held).values(due_at=now + bindparam("p_lease"))
        self.release_item = (
            update(items)
            .where(held)
            .values(
                status="pending",
                owner=None,
                attempts=items.c.attempts - 1,  # a shutdown is not a failed attempt
                dispatches=0,
                due_at=now,
            )
        )

    def _sweep(self) -> None:
        """The sweeper: publish due items again, fail lost ones."""
        runs, items, now, namespace = self.tables.runs, self.tables.items, self.now, self.namespace
        in_ns, lost, free, dispatcher = self._in_ns, self._lost, self._free, self.dispatcher
        registered = items.c.name.in_(bindparam("p_names", expanding=True))
        exhausted = and_(lost, items.c.recoveries + 1 >= bindparam("p_max_recoveries"))
        # An item is its run's broker's to publish (or anyone's, once overdue by
        # p_takeover: see dispatched_here).
        run_here = exists().where(
            runs.c.namespace == namespace,
            runs.c.id == items.c.run_id,
            self.here(runs.c.dispatcher),
        )
        # The statement's start, not clock_timestamp(): a stable value bounds the range of
        # ix_items_due, so a poll reads only the due items, not every leased or pending
        # one's entry (20,000 items in flight: a 50 ms filter of each, every poll).
        due_by = self.dialect.stable_now
        item_here = (
            true()
            if dispatcher is None
            else or_(run_here, items.c.due_at <= due_by - bindparam("p_takeover", type_=Float))
        )
        is_due = and_(
            in_ns, registered, items.c.due_at.isnot(None), items.c.due_at <= due_by, item_here
        )
        due = (
            select(items.c.run_id, items.c.idx, items.c.item)
            .where(is_due, ~exhausted, free)
            .order_by(items.c.due_at)
            .limit(bindparam("p_limit"))
        )
        key_columns = tuple_(items.c.run_id, items.c.idx, items.c.item)
        if self.dialect.locks_rows:
            due_items = due.with_for_update(skip_locked=True).cte("due_items")
            due_items = due_items.prefix_with("MATERIALIZED")
            picked: Any = and_(
                items.c.run_id == due_items.c.run_id,
                items.c.idx == due_items.c.idx,
                items.c.item == due_items.c.item,
            )
        else:
            picked = key_columns.in_(due)
        backoff = case(
            (items.c.dispatches >= 6, 64), else_=literal_column("1").op("<<")(items.c.dispatches)
        )
        self.sweep_due_items = (
            update(items)
            .where(in_ns, picked)
            .values(
                status="pending",
                owner=None,
                attempts=items.c.attempts - case((lost, 1), else_=0),
                recoveries=items.c.recoveries + case((lost, 1), else_=0),
                dispatches=items.c.dispatches + 1,
                due_at=now + bindparam("p_grace") * backoff,
            )
            .returning(*columns_of(items, DueItem))
        )
        self.lost_items = (
            select(*columns_of(items, LostItem))
            .where(is_due, exhausted)
            .limit(bindparam("p_limit"))
        )

    def _children(self) -> None:
        """A child run's item takes its outcome; the backstop for one that never heard."""
        runs, items, now, namespace = self.tables.runs, self.tables.items, self.now, self.namespace
        in_ns, unsettled = self._in_ns, self._unsettled
        child = runs.alias("child")
        of_child = self._of_child
        child_status = of_child(child.c.status)
        child_finished = exists().where(
            child.c.namespace == namespace,
            child.c.id == items.c.child_id,
            child.c.status.in_(FINISHED_STATUSES),
        )
        # The parent's item takes the child's outcome (run in the child's settling
        # transaction, after the parent's row is locked).
        self.settle_child_item = (
            update(items)
            .where(
                self._key,
                items.c.child_id == bindparam("p_child_id"),
                unsettled,
                child_finished,
            )
            .values(
                status=case(
                    (child_status == "SUCCEEDED", "ok"),
                    (child_status == "FAILED", "error"),
                    else_="cancelled",
                ),
                output=of_child(child.c.result),
                # A cancelled child's reason, as text; a failed child's encoded error.
                error=case(
                    (child_status == "FAILED", of_child(child.c.error)),
                    else_=of_child(child.c.cancel_reason),
                ),
                owner=None,
                due_at=None,
                finished_at=now,
            )
            .returning(items.c.awaited)
        )
        self.get_parent = select(runs.c.parent_id, runs.c.parent_idx).where(self.run_is)
        # The sweeper's backstop: a child finished, its parent's item never heard of it.
        self.orphaned_children = (
            select(items.c.run_id, items.c.idx, items.c.child_id)
            .where(in_ns, open_child(items), child_finished)
            .limit(bindparam("p_limit"))
        )

    def _cancel(self) -> None:
        """Cancel a run's pending items and children; revoke an item."""
        items, now = self.tables.items, self.now
        of_run, unsettled, free = self._of_run, self._unsettled, self._free
        self.cancel_run_items = (
            update(items)
            # An item running in its open transaction (locked) finishes and records.
            .where(of_run, unsettled, items.c.status == "pending", items.c.child_id.is_(None), free)
            .values(
                status="cancelled",
                error=bindparam("p_reason"),
                owner=None,
                due_at=None,
                finished_at=now,
            )
        )
        # A revoke of the item's task id (celery control revoke): settled "revoked" whatever
        # it is doing; a delivery still running it then finds its outcome not recorded.
        self.revoke_item = (
            update(items)
            .where(self._key, unsettled, items.c.child_id.is_(None))
            .values(
                status="revoked",
                error=bindparam("p_error"),
                owner=None,
                due_at=None,
                finished_at=now,
            )
            .returning(items.c.awaited)
        )
        self.cancel_run_children = select(items.c.child_id).where(
            of_run, unsettled, items.c.child_id.isnot(None), items.c.detached == false()
        )

    def _reads(self) -> None:
        """The items of a run, each with its child's status."""
        items = self.tables.items
        child_status = self._of_child(self.tables.runs.alias("child").c.status)
        self.list_items = (
            select(*columns_of(items, ItemRow, child_status=child_status))
            .where(self._of_run)
            .order_by(items.c.idx, items.c.item)
        )

    def _of_child(self, column: Any) -> Any:
        """``column`` (of the ``child`` alias of runs) of the item's child run."""
        child, items = column.table, self.tables.items
        return (
            select(column)
            .where(child.c.namespace == self.namespace, child.c.id == items.c.child_id)
            .scalar_subquery()
        )
