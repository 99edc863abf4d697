"""The database layer: tables in ``schema``, SQL in ``statements``, operations in ``store``.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from .operation_statements import ALL_STATUSES
from .outage import is_unreachable
from .records import (
    Claim,
    Collected,
    DueRun,
    Forked,
    NewRun,
    OldestRun,
    Outcome,
    PendingSignal,
    Resumed,
    RunFilter,
    RunRecord,
    RunStats,
    RunSummary,
    SignalStore,
    SignalTake,
    StateKey,
    StatusCount,
    StepRecord,
    StepWrite,
)
from .schema import ACTIVE_STATUSES, FINISHED_STATUSES, SETTLED_STATUSES, Tables, build_tables
from .store import Store

__all__ = [
    "ACTIVE_STATUSES",
    "ALL_STATUSES",
    "FINISHED_STATUSES",
    "SETTLED_STATUSES",
    "Claim",
    "Collected",
    "DueRun",
    "Forked",
    "NewRun",
    "OldestRun",
    "Outcome",
    "PendingSignal",
    "Resumed",
    "RunFilter",
    "RunRecord",
    "RunStats",
    "RunSummary",
    "SignalStore",
    "SignalTake",
    "StateKey",
    "StatusCount",
    "StepRecord",
    "StepWrite",
    "Store",
    "Tables",
    "build_tables",
    "is_unreachable",
]
