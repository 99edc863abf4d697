"""The Store's limiter operations: take a slot (and a token) or wait for one, in the same
transaction as the suspension; hand freed slots to the next waiters; read the limiters for
operators. Mixed into :class:`~celery_durable.store.store.Store`; the SQL is in
``sql/limiters.py``.

Every grant and hand-off of a limiter's key locks that key's row first, so that two
workers never both take its last slot.

A rate's bucket holds ``capacity`` tokens: that caps what an idle key saves up for a burst.
While runs wait for tokens, the key is not idle: each hand-off gives them every token minted
since the last one, uncapped, so the rate holds however seldom the sweeper hands them out.

Example::

    outcome = store.acquire_slot(Limit("payments", concurrency=5), "", run_id, idx, fence=f)
    woken = store.release_slot(Limit("payments", concurrency=5), "", run_id, idx, grace=60)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from celery_durable.store.db.connections import Connections
from celery_durable.store.records import DueRun, Outcome, StepRecord
from celery_durable.store.sql.build import hold_run, params
from celery_durable.store.sql.statements import Statements

WHOLE_RUN = -1  # the step index of a whole run's slot (a limited workflow)


@dataclasses.dataclass(frozen=True)
class Limit:
    """A limiter as its code declares it: ``concurrency`` slots per key (None: no cap),
    ``rate`` tokens a second per key (None: no rate) in a bucket of ``capacity``."""

    name: str
    concurrency: int | None = None
    rate: float | None = None
    capacity: float = 1.0


@dataclasses.dataclass(frozen=True)
class LimiterUsage:
    """One limiter key as operators see it."""

    limiter: str
    key: str
    in_use: int
    waiting: int
    oldest_wait: float | None  # seconds the oldest waiter has waited
    tokens: float | None  # tokens in its bucket now (None: no rate)


class LimiterOps:
    """A limiter's slots: taken, waited for, handed off, freed; and their usage."""

    db: Connections
    sql: Statements

    def acquire_slot(
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
    ) -> Outcome:
        """Take a slot (and a token) of ``limit``'s ``key`` for the run's step ``idx``.

        RECORDED: held, now or handed to it before. SUSPENDED: none is free (or waiters
        come first), so the run waits for it, written in the same transaction: with
        ``fence``, the running run gives its lease back, WAITING at its step (``park``
        "WAITING") or PENDING with no message (``park`` "PENDING", a whole run); without,
        a run not yet published keeps no due time. LEASE_LOST, CANCELLED: nothing written.
        ``carried``: deferred steps' records, written with it.
        """
        sql = self.sql.limiters
        values = params(
            limiter=limit.name, key=key, run_id=run_id, idx=idx, priority=priority, fence=fence
        )
        with self.db.transaction() as conn:
            if fence is not None:
                refused = hold_run(conn, self.sql.steps, run_id, fence, carried)
                if refused is not None:
                    return refused
            bucket = _lock_key(conn, sql, values)
            grant = conn.execute(sql.grant_of, values).first()
            if grant is not None and grant.held:
                return Outcome.RECORDED
            since = bucket.now if grant is None else grant.requested_at
            ahead = conn.execute(sql.count_waiters_ahead, {**values, "p_since": since}).scalar()
            # Waiters behind this one keep the bucket busy (their tokens are uncapped); with
            # none, the key was idle and its bucket starts again from what it holds, capped.
            busy = bool(ahead) or (
                limit.rate is not None
                and bool(conn.execute(sql.count_other_waiters, values).scalar())
            )
            tokens = _tokens(limit, bucket, uncapped=busy)
            if (
                not ahead
                and _free(conn, sql, limit, values) > 0
                and (tokens is None or tokens >= 1)
            ):
                conn.execute(sql.take_grant, values)
                _spend(conn, sql, limit, values, tokens, 1, bucket.now)
                return Outcome.RECORDED
            conn.execute(sql.add_waiter, values)
            if not busy:  # the first waiter: tokens owed to waiters are minted from now
                _spend(conn, sql, limit, values, tokens, 0, bucket.now)
            if fence is None:
                statement = sql.park_new_run
            else:
                statement = sql.suspend_for_limiter if park == "WAITING" else sql.park_for_limiter
            conn.execute(statement, values)
            return Outcome.SUSPENDED

    def holds_slot(self, limit: Limit, run_id: str, idx: int = WHOLE_RUN) -> bool:
        """Whether the run's step ``idx`` holds a slot of ``limit`` (taken at its start, or
        handed to it): one read, no lock."""
        values = params(limiter=limit.name, run_id=run_id, idx=idx)
        found = self.db.one(self.sql.limiters.grant_of, values)
        return found is not None and bool(found[0])

    def release_slot(
        self, limit: Limit, key: str, run_id: str, idx: int, grace: float
    ) -> list[DueRun]:
        """Give the slot back (the step finished; the run settled or suspended) and hand
        it to the next waiters of ``key``, in the same transaction; returns the runs woken,
        to publish."""
        sql = self.sql.limiters
        with self.db.transaction() as conn:
            conn.execute(sql.release_grant, params(limiter=limit.name, run_id=run_id, idx=idx))
            return _hand_off_key(conn, sql, limit, key, grace, most=100)

    def hand_off(self, limit: Limit, grace: float, most: int = 100) -> list[DueRun]:
        """Hand the free slots (and tokens) of ``limit`` to its next waiters: per key, the
        highest priority first, then the oldest; every key with waiters in turn (one
        transaction each), the one whose oldest waiter waited longest first. Returns the
        runs woken (due now), for the caller to publish."""
        sql = self.sql.limiters
        with self.db.transaction() as conn:
            conn.execute(sql.free_lapsed_grants, params(limiter=limit.name))
            keys = [
                row.key for row in conn.execute(sql.keys_waited_for, params(limiter=limit.name))
            ]
        woken: list[DueRun] = []
        for each in keys:
            with self.db.transaction() as conn:
                woken += _hand_off_key(conn, sql, limit, each, grace, most)
        return woken

    def limiter_usage(self, limits: dict[str, Limit]) -> list[LimiterUsage]:
        """Each key of each limiter: slots in use, waiters, the oldest wait, tokens left."""
        sql = self.sql.limiters
        with self.db.read() as conn:
            usage = conn.execute(sql.limiter_usage).all()
            buckets = {(b.limiter, b.key): b for b in conn.execute(sql.limiter_buckets)}
        found: dict[tuple[str, str], LimiterUsage] = {}
        for row in usage:
            limit = limits.get(row.limiter, Limit(row.limiter))
            bucket = buckets.get((row.limiter, row.key))
            tokens = None if bucket is None else _tokens(limit, bucket)
            oldest = None if row.since is None else max(0.0, row.now - row.since)
            found[(row.limiter, row.key)] = LimiterUsage(
                row.limiter, row.key, int(row.in_use), int(row.waiting), oldest, tokens
            )
        for (name, key), bucket in buckets.items():
            if (name, key) not in found:
                tokens = _tokens(limits.get(name, Limit(name)), bucket)
                found[(name, key)] = LimiterUsage(name, key, 0, 0, None, tokens)
        return [found[k] for k in sorted(found)]


def _lock_key(conn: Connection, sql: Any, values: dict[str, Any]) -> Any:
    conn.execute(sql.add_key, values)
    return conn.execute(sql.lock_key, values).one()


def _tokens(limit: Limit, bucket: Any, *, uncapped: bool = False) -> float | None:
    """The tokens in the key's bucket now (None: the limiter has no rate); ``uncapped``
    while runs wait for them, every token minted since the bucket was last written."""
    if limit.rate is None:
        return None
    refilled = bucket.tokens + max(0.0, bucket.now - bucket.refilled_at) * limit.rate
    return float(refilled if uncapped else min(limit.capacity, refilled))


def _free(conn: Connection, sql: Any, limit: Limit, values: dict[str, Any]) -> float:
    if limit.concurrency is None:
        return math.inf
    return float(limit.concurrency - conn.execute(sql.count_in_use, values).scalar_one())


def _spend(
    conn: Connection,
    sql: Any,
    limit: Limit,
    values: dict[str, Any],
    tokens: float | None,
    n: int,
    now: float,
) -> None:
    """Write the bucket as of ``now``, ``n`` tokens spent; what is left is capped again."""
    if tokens is not None:
        left = min(limit.capacity, tokens - n)
        conn.execute(sql.spend_tokens, {**values, "p_tokens": left, "p_now": now})


def _hand_off_key(
    conn: Connection, sql: Any, limit: Limit, key: str, grace: float, most: int
) -> list[DueRun]:
    values = params(limiter=limit.name, key=key, grace=grace)
    bucket = _lock_key(conn, sql, values)
    tokens = _tokens(limit, bucket, uncapped=True)  # handed to waiters, if it has any
    room = min(_free(conn, sql, limit, values), most)
    if tokens is not None:
        room = min(room, math.floor(tokens))
    if room <= 0:
        return []
    picked = conn.execute(sql.next_waiters, {**values, "p_limit": int(room)}).all()
    woken: list[DueRun] = []
    for row in picked:
        granted = {**values, "p_run_id": row.run_id, "p_idx": row.idx}
        conn.execute(sql.hand_grant, granted)
        found = conn.execute(sql.wake_waiter, granted).first()
        if found is not None:
            woken.append(DueRun(*found))
    if picked:
        _spend(conn, sql, limit, values, tokens, len(picked), bucket.now)
    return woken
