"""The limiters' operator API, declared once: what ``celery -A app durable limiters`` and
the dashboard's workflows page read. ``Durable`` inherits it.

Example::

    durable.limiter_usage()                                  # a Durable is one
    LimiterOperations.of(operations).declared_limits()      # from any Operations
"""

from __future__ import annotations

from celery_durable.ops.operations import Operations
from celery_durable.runs import stored_runs
from celery_durable.store import Limit, LimiterUsage


class LimiterOperations(Operations):
    """The operations on one runtime's limiters."""

    def declared_limits(self) -> dict[str, Limit]:
        """The limits of the limiters this process declares, by name."""
        return {name: limiter.limit for name, limiter in self.runtime.limiters.items()}

    def limiter_usage(self) -> list[LimiterUsage]:
        """Each key of each limiter: slots in use, waiters, the oldest wait, tokens left."""
        return stored_runs.limiter_usage(self.runtime)
