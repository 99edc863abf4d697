"""The limiters' operator API, declared once: what ``celery -A app durable limiters`` and
the dashboard's workflows page read. ``Durable`` inherits it.

Example::

    durable.limiter_usage()                                  # a Durable is one
    LimiterOperations.of(operations).declared_limits()      # from any Operations
"""

from __future__ import annotations

from celery_durable.limiters.buckets import Limit
from celery_durable.limiters.store_area import LIMITERS
from celery_durable.limiters.usage import LimiterUsage
from celery_durable.ops.operations import Operations


class LimiterOperations(Operations):
    """The operations on one runtime's limiters."""

    def declared_limits(self) -> dict[str, Limit]:
        """The limits of the limiters this process declares, by name."""
        return {name: limiter.limit for name, limiter in self.runtime.limiters.items()}

    def limiter_usage(self) -> list[LimiterUsage]:
        """Each key of each limiter: slots in use, waiters, the oldest wait, tokens left;
        for the limits this process declares (a limiter only another app declares shows
        its counts)."""
        return LIMITERS.of(self.runtime.store).limiter_usage(self.declared_limits())
