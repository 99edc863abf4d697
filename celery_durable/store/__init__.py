"""The database layer: tables in ``schema``, SQL in ``statements``, operations in ``store``.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from .item_ops import DISPATCH_BATCH
from .open_items import CLAIM, RUN, SKIP, OpenItem
from .operation_statements import ALL_STATUSES
from .outage import is_unreachable
from .records import (
    Cancellation,
    Claim,
    Collected,
    DueItem,
    DueRun,
    FanOut,
    FanOutState,
    Forked,
    ItemClaim,
    ItemFailure,
    ItemRow,
    ItemWrite,
    LostItem,
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
from .sql import TAKEOVER
from .store import Store

__all__ = [
    "ACTIVE_STATUSES",
    "ALL_STATUSES",
    "Cancellation",
    "Claim",
    "Collected",
    "DISPATCH_BATCH",
    "DueItem",
    "DueRun",
    "FanOut",
    "FanOutState",
    "FINISHED_STATUSES",
    "Forked",
    "ItemClaim",
    "ItemFailure",
    "ItemRow",
    "ItemWrite",
    "OpenItem",
    "CLAIM",
    "RUN",
    "SKIP",
    "LostItem",
    "SETTLED_STATUSES",
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
    "TAKEOVER",
    "build_tables",
    "is_unreachable",
]
