"""A limiter as its code declares it, and its token bucket: one row per limiter key
(``limiter_keys``), locked by every grant of a rate, holding ``capacity`` tokens at most
while the key is idle. While runs wait for tokens, a hand-off gives them the tokens minted
since the bucket was last written, up to ``catch_up`` seconds' worth (``CATCH_UP``, or the
sweeper's three polls), so the rate holds at any poll interval and a late hand-off is no
burst.

Example::

    bucket = lock_bucket(conn, sql.limiters, values)
    tokens = tokens_in(Limit("api", rate=20.0, capacity=5.0), bucket)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import Connection

CATCH_UP = 2.0  # seconds of tokens a hand-off gives waiters at most (a late one)


@dataclasses.dataclass(frozen=True)
class Limit:
    """A limiter as its code declares it: ``concurrency`` slots per key (None: no cap),
    ``rate`` tokens a second per key (None: no rate) in a bucket of ``capacity``."""

    name: str
    concurrency: int | None = None
    rate: float | None = None
    capacity: float = 1.0


def lock_bucket(conn: Connection, sql: Any, values: dict[str, Any]) -> Any:
    conn.execute(sql.add_key, values)
    return conn.execute(sql.lock_key, values).one()


def tokens_in(
    limit: Limit, bucket: Any, *, uncapped: bool = False, catch_up: float = CATCH_UP
) -> float | None:
    """The tokens in the key's bucket now (None: the limiter has no rate); ``uncapped``
    while runs wait for them: the tokens minted since the bucket was last written, up to
    ``catch_up`` seconds' worth."""
    if limit.rate is None:
        return None
    minted = max(0.0, bucket.now - bucket.refilled_at) * limit.rate
    if uncapped:
        return float(bucket.tokens + min(minted, catch_up * limit.rate))
    return float(min(limit.capacity, bucket.tokens + minted))


def spend_tokens(
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
