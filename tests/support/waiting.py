"""Wait on conditions with deadlines, never on bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
    *,
    error: type[Exception] = AssertionError,
) -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` seconds.

    A test fails with an ``AssertionError``; the benchmarks, which catch a timeout and go
    on, pass ``error=TimeoutError``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise error(f"timed out after {timeout}s waiting for {text}")
        time.sleep(interval)
