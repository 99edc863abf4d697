"""What operators see of the limiters: each key's slots in use, its waiters, the oldest
wait and the tokens left (``durable limiters``, the dashboard, Prometheus). Part of the
limiters area (``store.limiters``).

Example::

    for usage in store.limiters.limiter_usage({"payments": Limit("payments", concurrency=5)}):
        print(usage.limiter, usage.key, usage.in_use, usage.waiting)
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from celery_durable.limiters.buckets import Limit, tokens_in
from celery_durable.limiters.statements import LimiterStatements
from celery_durable.store.db.connections import Connections


@dataclasses.dataclass(frozen=True)
class LimiterUsage:
    """One limiter key as operators see it."""

    limiter: str
    key: str
    in_use: int
    waiting: int
    oldest_wait: float | None  # seconds the oldest waiter has waited
    tokens: float | None  # tokens in its bucket now (None: no rate)


class UsageSql(Protocol):
    """The statements the usage is read with (the limiters area's)."""

    limiters: LimiterStatements


class LimiterUsageOps:
    """The limiters' usage, read for operators."""

    db: Connections
    sql: UsageSql

    def limiter_usage(self, limits: dict[str, Limit]) -> list[LimiterUsage]:
        """Each key of each limiter: slots in use, waiters, the oldest wait, tokens left."""
        sql = self.sql.limiters
        with self.db.read() as conn:
            usage = conn.execute(sql.limiter_usage).all()
            slots = {(s.limiter, s.key): int(s.in_use) for s in conn.execute(sql.slots_in_use)}
            buckets = {(b.limiter, b.key): b for b in conn.execute(sql.limiter_buckets)}
        found: dict[tuple[str, str], LimiterUsage] = {}
        for row in usage:
            limit = limits.get(row.limiter, Limit(row.limiter))
            bucket = buckets.get((row.limiter, row.key))
            tokens = None if bucket is None else tokens_in(limit, bucket)
            oldest = None if row.since is None else max(0.0, row.now - row.since)
            in_use = int(row.in_use) + slots.pop((row.limiter, row.key), 0)
            found[(row.limiter, row.key)] = LimiterUsage(
                row.limiter, row.key, in_use, int(row.waiting), oldest, tokens
            )
        for (name, key), bucket in buckets.items():
            if (name, key) not in found:
                tokens = tokens_in(limits.get(name, Limit(name)), bucket)
                found[(name, key)] = LimiterUsage(
                    name, key, slots.pop((name, key), 0), 0, None, tokens
                )
        for (name, key), in_use in slots.items():
            if (name, key) not in found:
                found[(name, key)] = LimiterUsage(name, key, in_use, 0, None, None)
        return [found[k] for k in sorted(found)]
