"""The limiters area's slot operations: take a slot (and a token) or wait for one, in the
same transaction as the suspension; hand freed slots to the next waiters. Part of the
limiters area (``store.limiters``, ``store_area.py``); the SQL is in ``statements.py``.

A key's slots are rows, taken with FOR UPDATE SKIP LOCKED: takers of one key lock different
rows and never wait for each other while slots are free, and two of them never take one
last slot. A slot is free once its holder is not live (its step recorded, its run settled
or waiting, its lease out) without a write: a holder writes a release only to hand its
slot on, when it saw waiters, or to give it back early (a failure, a retry). A run
limiter's start takes its slot in the start's own transaction (one round trip on
Postgres).

A rate's bucket (the key's row, which every grant of a rate locks) holds ``capacity``
tokens: that caps what an idle key saves up for a burst. While runs wait for tokens, each
hand-off gives them the tokens minted since the last one, capped at three sweeper polls' worth
(``catch_up``): the rate holds at any poll interval, and a sweep that comes late (a loaded
machine) gives no burst of the tokens it missed.

Example::

    limiters = LIMITERS.of(store)
    outcome, waited = limiters.take_slot(Limit("payments", concurrency=5), "", run_id, idx, fence=f)
    woken = limiters.release_slot(Limit("payments", concurrency=5), "", run_id, idx, grace=60)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from celery_durable.limiters.buckets import CATCH_UP, Limit, lock_bucket, spend_tokens, tokens_in
from celery_durable.limiters.run_slot_statements import LimitedRunStatements
from celery_durable.limiters.statements import WHOLE_RUN, LimiterStatements
from celery_durable.store.db.connections import Connections
from celery_durable.store.db.dialect import Dialect
from celery_durable.store.db.foreign import ForeignTransaction
from celery_durable.store.records import DueRun, NewRun, Outcome, StepRecord
from celery_durable.store.sql.build import hold_run, params, run_params
from celery_durable.store.sql.runs import RunStatements
from celery_durable.store.sql.steps import StepStatements
from celery_durable.store.store import Store

__all__ = ["WHOLE_RUN", "Limit", "LimiterOps", "SlotHeld"]

FIRST_SLOT_ROWS = 8  # a key's first rows; then doubled as they are all taken
CROWDED = 16  # taken rows a take may look past before the key gets more rows


class SlotHeld(NamedTuple):
    """A slot held: its row, and whether other runs wait for its key (hand it on)."""

    slot: int
    waited: bool


class SlotSql(Protocol):
    """The statements slots are taken with (the limiters area's), and the kernel's."""

    limiters: LimiterStatements
    limited_runs: LimitedRunStatements
    runs: RunStatements
    steps: StepStatements


class LimiterOps:
    """A limiter's slots: taken, waited for, handed off, freed."""

    store: Store
    db: Connections
    dialect: Dialect
    sql: SlotSql
    _slot_rows: dict[tuple[str, str], int]  # the rows of a key this process has seen
    _slot_cursor: dict[tuple[str, str], int]  # where this process's next take looks first

    def insert_limited_run(
        self,
        run: NewRun,
        limit: Limit,
        key: str,
        connection: Connection | Session | ForeignTransaction | None = None,
    ) -> tuple[bool, bool]:
        """Insert a PENDING run of a limited workflow and take its slot in the same
        transaction (the caller's, with ``connection``): (inserted, holds its slot). A run
        without one waits, PENDING with no due time, until a hand-off publishes it."""
        values = run_params(run)
        taking = self._slot_params(limit, key, run.id, WHOLE_RUN, run.priority)
        sql = self.sql
        try:
            if connection is None and limit.rate is None and self.db.is_postgres:
                row = self.db.one(sql.limited_runs.start_taking_slot, {**values, **taking})
                inserted, taken = (0, None) if row is None else row
                if taken is not None:
                    self._took_slot(limit, key, taking["p_from"], int(taken))
                if not inserted or taken is not None:
                    return bool(inserted), taken is not None
                # Its wait (if it must) is queued at the run's priority, like any other.
                taken_now = self.take_slot(limit, key, run.id, priority=run.priority)
                return True, taken_now[0] is Outcome.RECORDED
            if connection is not None:
                return self._insert_and_acquire(connection, values, limit, key, run)
            with self.db.transaction() as conn:
                return self._insert_and_acquire(conn, values, limit, key, run)
        except Exception as exc:
            self.store.raise_if_tables_missing(exc)
            raise

    def _insert_and_acquire(
        self, conn: Any, values: dict[str, Any], limit: Limit, key: str, run: NewRun
    ) -> tuple[bool, bool]:
        if conn.execute(self.sql.runs.insert_run, values).first() is None:
            return False, False
        outcome, _ = self._acquire_on(conn, limit, key, run.id, WHOLE_RUN, run.priority, None, "")
        return True, outcome is Outcome.RECORDED

    def take_slot(
        self,
        limit: Limit,
        key: str,
        run_id: str,
        idx: int = WHOLE_RUN,
        *,
        priority: int = 0,
        fence: int | None = None,
        park: str = "WAITING",
        carried: Sequence[StepRecord] = (),
    ) -> tuple[Outcome, bool]:
        """Take a slot (and a token) of ``limit``'s ``key`` for the run's step ``idx``;
        returns the outcome and whether other runs wait for the key (then the holder's
        release must hand the slot on: ``release_slot``).

        RECORDED: held, now or handed to it before. SUSPENDED: none is free (or waiters
        come first), so the run waits for it, written in the same transaction: with
        ``fence``, the running run gives its lease back, WAITING at its step (``park``
        "WAITING") or PENDING with no message (``park`` "PENDING", a whole run); without,
        a run not yet published keeps no due time. LEASE_LOST, CANCELLED: nothing written.
        ``carried``: deferred steps' records, written with it.
        """
        if fence is not None and limit.rate is None and not carried and self.db.is_postgres:
            # The common case in one statement: a free slot, no waiter ahead, the lease held.
            # Its commit doesn't wait for the WAL flush: the step's record flushes it, and a
            # take lost in a database crash lets one more step run only while this one does.
            values = {**self._slot_params(limit, key, run_id, idx, priority), "p_fence": fence}
            row = self.db.one(self.sql.limiters.take_slot_fenced, values, relaxed=True)
            if row is not None:
                if row[2]:  # it had waited: its wait is over
                    self.db.one(self.sql.limiters.release_grant, values)
                self._took_slot(limit, key, values["p_from"], int(row[0]))
                return Outcome.RECORDED, bool(row[1])
            tried = True
        else:
            tried = False
        with self.db.transaction() as conn:
            if fence is not None:
                refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
                if refused is not None:
                    return refused, False
            return self._acquire_on(
                conn, limit, key, run_id, idx, priority, fence, park, tried=tried
            )

    def _acquire_on(
        self,
        conn: Any,
        limit: Limit,
        key: str,
        run_id: str,
        idx: int,
        priority: int,
        fence: int | None,
        park: str,
        *,
        tried: bool = False,
    ) -> tuple[Outcome, bool]:
        """``take_slot`` on ``conn``: the run's lease (with ``fence``) is held already.
        ``tried``: a take just found no free slot (look for one handed to it first)."""
        sql = self.sql.limiters
        values = {**self._slot_params(limit, key, run_id, idx, priority), "p_fence": fence}
        busy, bucket, tokens = True, None, None
        if limit.rate is None:
            held = self._hold_on(conn, limit, values, tried=tried)
            if held is not None:
                return Outcome.RECORDED, held.waited
        else:
            bucket = lock_bucket(conn, sql, values)
            grant = conn.execute(sql.grant_of, values).first()
            if limit.concurrency is None:
                holds = grant is not None and bool(grant.held)
            else:
                holds = conn.execute(sql.confirm_slot, values).first() is not None
            if holds:
                return Outcome.RECORDED, True
            since = bucket.now if grant is None else grant.requested_at
            ahead = conn.execute(sql.count_waiters_ahead, {**values, "p_since": since}).scalar()
            # Waiters behind this one keep the bucket busy (their tokens are caught up); with
            # none, the key was idle and its bucket starts again from what it holds, capped.
            busy = bool(ahead) or bool(conn.execute(sql.count_other_waiters, values).scalar())
            tokens = tokens_in(limit, bucket, uncapped=busy)
            if not ahead and tokens is not None and tokens >= 1:
                held = None if limit.concurrency is None else self._hold_on(conn, limit, values)
                if limit.concurrency is None or held is not None:
                    if limit.concurrency is None:
                        conn.execute(sql.take_grant, values)
                    spend_tokens(conn, sql, limit, values, tokens, 1, bucket.now)
                    return Outcome.RECORDED, busy
        conn.execute(sql.add_waiter, values)
        if not busy and bucket is not None:  # the first waiter: owed tokens mint from now
            spend_tokens(conn, sql, limit, values, tokens, 0, bucket.now)
        if fence is None:
            statement = sql.park_new_run
        else:
            statement = sql.suspend_for_limiter if park == "WAITING" else sql.park_for_limiter
        conn.execute(statement, values)
        return Outcome.SUSPENDED, True

    def _hold_on(
        self,
        conn: Any,
        limit: Limit,
        values: dict[str, Any],
        *,
        handing: bool = False,
        tried: bool = False,
    ) -> SlotHeld | None:
        """A free slot taken now (the rows grown while every one is taken), or the one
        the run's step holds already (handed to it while it waited); None: none is free.
        A run that waited for it no longer does. ``tried``: a take just failed, so the
        slot handed to it, if any, is looked for first."""
        sql = self.sql.limiters
        if tried:
            held = conn.execute(sql.confirm_slot, values).first()
            if held is not None:
                return SlotHeld(held.slot, bool(held.waited))
        take = sql.hand_slot if handing else sql.take_slot
        # Before the wait for the key's rows (``lock_key_slots``), a take must leave no
        # row locked that it didn't take (see ``begin_take``). A rate's takers wait for its
        # bucket first, one at a time; a hand-off doesn't wait for the rows.
        undo_misses = self.dialect.locks_rows and not handing and limit.rate is None
        start = values["p_from"]
        sure = False
        while True:
            found = self._take(conn, take, {**values, "p_from": start}, undo_misses)
            if found is None and start > 0:
                found = self._take(conn, take, {**values, "p_from": 0}, undo_misses)
            if found is not None:
                if not handing:
                    self._advance_cursor(limit, values["p_key"], found.slot)
                if found.queued and not handing:
                    conn.execute(sql.release_grant, values)
                return SlotHeld(found.slot, bool(found.waited))
            if not tried:  # (with ``tried`` it was looked for just before the first take)
                held = conn.execute(sql.confirm_slot, values).first()
                if held is not None:
                    return SlotHeld(held.slot, bool(held.waited))
            tried = False
            start = self._grow_slots(conn, limit, values)
            if start is None and not sure and not handing:
                # A take skips the rows other takes have locked, and reads holders as of
                # when it began: under load it can miss a slot that is free. Before a
                # wait, the key's rows are locked (the takes in flight end) and read again.
                # Not in a hand-off: it holds the row it gave back (it stops; a sweep
                # hands on what it missed).
                sure = True
                start = 0
                if self.dialect.locks_rows:
                    conn.execute(sql.lock_key_slots, values).all()
            if start is None:
                return None

    def _take(self, conn: Any, take: Any, values: dict[str, Any], undo_misses: bool) -> Any:
        """One take's row (None: it found no free slot); with ``undo_misses``, a take that
        found none is undone, releasing any row it locked without taking."""
        if not undo_misses:
            return conn.execute(take, values).first()
        sql = self.sql.limiters
        conn.execute(sql.begin_take)
        found = conn.execute(take, values).first()
        conn.execute(sql.end_take if found is not None else sql.undo_take)
        return found

    def _took_slot(self, limit: Limit, key: str, start: int, slot: int) -> None:
        """A take got ``slot``: this process's next take looks first at the row after it.
        Round-robin, that row is the one this process took longest ago, the likeliest to be
        free again (a random row is as likely held as any: under a backlog in flight most
        are). A take that looked past ``CROWDED`` taken rows adds rows, so that takes stay
        short (they read each taken row's holder) while most slots are in use."""
        self._advance_cursor(limit, key, slot)
        rows = self._slot_rows.get((limit.name, key), 0)
        if rows <= 0:  # a key this process has not seen grow: learn its rows once
            rows = self._count_slot_rows(limit, key)
        if rows <= 0 or (slot - start) % rows <= CROWDED or rows >= (limit.concurrency or 0):
            return
        with self.db.transaction() as conn:
            self._grow_slots(conn, limit, self._slot_params(limit, key, "", WHOLE_RUN, 0))

    def _advance_cursor(self, limit: Limit, key: str, slot: int) -> None:
        self._slot_cursor[(limit.name, key)] = slot + 1

    def _count_slot_rows(self, limit: Limit, key: str) -> int:
        values = self._slot_params(limit, key, "", WHOLE_RUN, 0)
        rows = int(self.db.one(self.sql.limiters.count_slot_rows, values)[0])  # type: ignore[index]
        self._note_slot_rows(limit, key, rows)
        return rows

    def _grow_slots(self, conn: Any, limit: Limit, values: dict[str, Any]) -> int | None:
        """Every row of the key is taken: add rows (doubling, up to ``concurrency``);
        the first new one, or None at the limit."""
        sql = self.sql.limiters
        have = int(conn.execute(sql.count_slot_rows, values).scalar_one())
        want = min(limit.concurrency or 0, max(FIRST_SLOT_ROWS, 2 * have))
        self._note_slot_rows(limit, values["p_key"], max(have, want))
        if want <= have:
            return None
        conn.execute(sql.add_slot_row, [{**values, "p_slot": n} for n in range(have, want)])
        return have

    def confirm_slot(
        self, limit: Limit, key: str, run_id: str, idx: int = WHOLE_RUN, *, read: bool = False
    ) -> SlotHeld | None:
        """The slot the run's step holds (taken at its start, or handed to it). Confirmed
        by a write that a concurrent taker of the row waits for (one statement, its commit
        not waiting for the WAL flush); with ``read``, only read: enough for a run that has
        been live since it took the slot (a first delivery from PENDING), whose row no
        taker can have found free. None: it holds none (any more)."""
        values = self._slot_params(limit, key, run_id, idx, 0)
        sql = self.sql.limiters
        if limit.concurrency is None:
            found = self.db.one(sql.grant_of, values)
            return SlotHeld(-1, False) if found is not None and found[0] else None
        if read:
            row = self.db.one(sql.slot_of, values)
        else:
            row = self.db.one(sql.confirm_slot, values, relaxed=True)
        return None if row is None else SlotHeld(int(row[0]), bool(row[1]))

    def release_slot(
        self, limit: Limit, key: str, run_id: str, idx: int, grace: float
    ) -> list[DueRun]:
        """Give the slot back (the step failed; the run retries, or saw waiters) and hand
        it to the next waiters of ``key``, in the same transaction; returns the runs woken,
        to publish."""
        sql = self.sql.limiters
        with self.db.transaction() as conn:
            held = params(limiter=limit.name, run_id=run_id, idx=idx)
            conn.execute(sql.release_slot_row if limit.concurrency else sql.release_grant, held)
            # One slot freed: one waiter (with a rate, the tokens say); the sweeper hands on
            # what else came free.
            return self._hand_off_key(conn, limit, key, grace, most=1 if limit.concurrency else 100)

    def hand_off(
        self, limit: Limit, grace: float, most: int = 100, catch_up: float = CATCH_UP
    ) -> list[DueRun]:
        """Hand the free slots (and tokens) of ``limit`` to its next waiters: per key, the
        highest priority first, then the oldest; every key with waiters in turn (one
        transaction each), the one whose oldest waiter waited longest first. Returns the
        runs woken (due now), for the caller to publish. ``catch_up``: the seconds of
        tokens a late hand-off gives at most (the sweeper's: three of its polls)."""
        sql = self.sql.limiters
        with self.db.transaction() as conn:
            conn.execute(sql.free_lapsed_grants, params(limiter=limit.name))
            keys = [
                row.key for row in conn.execute(sql.keys_waited_for, params(limiter=limit.name))
            ]
        woken: list[DueRun] = []
        for each in keys:
            with self.db.transaction() as conn:
                woken += self._hand_off_key(conn, limit, each, grace, most, catch_up)
        return woken

    def _hand_off_key(
        self,
        conn: Any,
        limit: Limit,
        key: str,
        grace: float,
        most: int,
        catch_up: float = CATCH_UP,
    ) -> list[DueRun]:
        sql = self.sql.limiters
        values = {**self._slot_params(limit, key, "", WHOLE_RUN, 0), "p_grace": grace}
        bucket = tokens = None
        room = float(most)
        if limit.rate is not None:
            bucket = lock_bucket(conn, sql, values)
            tokens = tokens_in(limit, bucket, uncapped=True, catch_up=catch_up)  # to waiters
            room = min(room, math.floor(tokens or 0))
        if room <= 0:
            return []
        picked = conn.execute(sql.next_waiters, {**values, "p_limit": int(room)}).all()
        woken: list[DueRun] = []
        handed = 0
        for row in picked:
            granted = {**values, "p_run_id": row.run_id, "p_idx": row.idx, "p_from": 0}
            if limit.concurrency is None:
                conn.execute(sql.hand_grant, granted)
            else:
                if self._hold_on(conn, limit, granted, handing=True) is None:
                    break  # no slot free
                conn.execute(sql.release_grant, granted)  # its wait is over
            handed += 1
            found = conn.execute(sql.wake_waiter, granted).first()
            if found is not None:
                woken.append(DueRun(*found))
        if bucket is not None and handed:
            spend_tokens(conn, sql, limit, values, tokens, handed, bucket.now)
        return woken

    def _slot_params(
        self, limit: Limit, key: str, run_id: str, idx: int, priority: int
    ) -> dict[str, Any]:
        """A take's parameters; it looks first from the row after the last this process
        took (``_took_slot``), or from a random row of those it has seen, so that
        concurrent takers don't all read the same taken rows first."""
        rows = self._slot_rows.get((limit.name, key), 0)
        cursor = self._slot_cursor.get((limit.name, key))
        if rows <= 1:
            start = 0
        elif cursor is None:
            start = random.randrange(rows)
        else:
            start = cursor % rows
        return params(
            limiter=limit.name,
            key=key,
            run_id=run_id,
            idx=idx,
            priority=priority,
            concurrency=limit.concurrency or 0,
            **{"from": start},
        )

    def _note_slot_rows(self, limit: Limit, key: str, rows: int) -> None:
        if len(self._slot_rows) > 10_000:  # keys come and go: forget them, learn again
            self._slot_rows.clear()
            self._slot_cursor.clear()
        self._slot_rows[(limit.name, key)] = rows
