"""The database layer: tables in ``schema``, SQL in ``statements``, operations in ``store``.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from .item_ops import DISPATCH_BATCH
from .outage import is_unreachable
from .records import (
    Cancellation,
    Claim,
    DueItem,
    DueRun,
    FanOut,
    FanOutState,
    ItemClaim,
    ItemFailure,
    ItemRow,
    ItemWrite,
    LostItem,
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
    "DISPATCH_BATCH",
    "FINISHED_STATUSES",
    "Cancellation",
    "Claim",
    "DueItem",
    "DueRun",
    "FanOut",
    "FanOutState",
    "ItemClaim",
    "ItemFailure",
    "ItemRow",
    "ItemWrite",
    "LostItem",
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
