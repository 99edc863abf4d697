"""The database layer: tables in ``schema``, SQL in ``statements``, operations in ``store``.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from .records import (
    Claim,
    DueRun,
    NewRun,
    Outcome,
    RunRecord,
    SignalStore,
    SignalTake,
    StepRecord,
    StepWrite,
)
from .schema import ACTIVE_STATUSES, FINISHED_STATUSES, Tables, build_tables
from .store import Store, is_unavailable

__all__ = [
    "ACTIVE_STATUSES",
    "FINISHED_STATUSES",
    "Claim",
    "DueRun",
    "NewRun",
    "Outcome",
    "RunRecord",
    "SignalStore",
    "SignalTake",
    "StepRecord",
    "StepWrite",
    "Store",
    "Tables",
    "build_tables",
    "is_unavailable",
]
