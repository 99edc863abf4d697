"""A map over a flaky step: for tests of how a fan-out's items fail, retry in-process and
count their attempts, one task per item or in batches."""

from __future__ import annotations

from typing import Any

import celery_durable as cd


def flaky_map(durable: Any, count: int, batch_size: int = 1) -> tuple[Any, dict[int, int]]:
    """The workflow ``flakies(exceptions)`` (one attempt) and the tries of each item so far.

    It maps a step (3 attempts, no backoff) over ``range(count)``, ``batch_size`` items to
    a task, with ``return_exceptions=exceptions``, and returns each item's number or its
    error's type. Item 1 fails twice (ConnectionError), then returns; item 2 always raises
    ValueError; the others return at once."""
    tries: dict[int, int] = {}

    @durable.step(max_attempts=3, backoff=0)
    def flaky(n: int) -> int:
        tries[n] = tries.get(n, 0) + 1
        if n == 1 and tries[n] < 3:
            raise ConnectionError(f"try {tries[n]}")
        if n == 2:
            raise ValueError("never")
        return n

    @durable.workflow(max_attempts=1)
    def flakies(exceptions: bool) -> list[Any]:
        results = cd.map(flaky, range(count), batch_size=batch_size, return_exceptions=exceptions)
        return [r if isinstance(r, int) else r.error_type for r in results]

    return flakies, tries
