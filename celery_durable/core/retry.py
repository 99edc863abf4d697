"""The retry policy's two rules, each written once: how long to wait before the next try,
and whether a failure is worth one. Steps (in the body), workflow retries, the lease
heartbeat, the sweeper and the broker-side redeliveries (in the engine and runs) all use them.

Example::

    if retryable(exc, step.retry_on, step.dont_retry_on) and attempt < max_attempts:
        time.sleep(backoff(0.5, attempt - 1, 60.0))   # 0.5, 1, 2, 4, ... 60, 60
"""

from __future__ import annotations

import math

from celery_durable.errors import NonDeterminismError, PermanentError


def backoff(first: float, doublings: int, cap: float) -> float:
    """``first`` doubled ``doublings`` times, at most ``cap`` (``first`` and ``cap`` >= 0).

    ``ldexp`` is that product exactly, as ``first * 2 ** doublings`` is; unlike it, it does
    not overflow for a count past a float's exponent (attempt 1100 of a patient step).
    """
    try:
        return float(min(math.ldexp(first, doublings), cap))
    except OverflowError:  # only a positive first overflows, so it is past any cap
        return float(cap)


def retryable(
    exc: BaseException,
    retry_on: tuple[type[BaseException], ...] = (BaseException,),
    dont_retry_on: tuple[type[BaseException], ...] = (),
) -> bool:
    """Whether another try may end differently: never for a PermanentError, a
    NonDeterminismError or a recorded outcome that replay raises again identically
    (``final``: a remote step's or a child's failure); otherwise when ``exc`` is one of
    ``retry_on`` and none of ``dont_retry_on``."""
    if getattr(exc, "final", False) or isinstance(exc, PermanentError | NonDeterminismError):
        return False
    if dont_retry_on and isinstance(exc, dont_retry_on):
        return False
    return isinstance(exc, retry_on)
