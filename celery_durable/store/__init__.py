"""The database layer: tables in ``schema``, SQL in ``statements``, operations in ``store``.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from .outage import is_unreachable
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
from .store import Store

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
    "is_unreachable",
]
