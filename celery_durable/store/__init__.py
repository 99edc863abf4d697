"""The database layer: tables in ``schema``, SQL in ``sql/`` (one statements class per area,
held as ``store.sql.<area>``), operations in ``store`` and one module per area of them.

Example::

    from celery_durable.store import Store, StepRecord, Outcome
"""

from celery_durable.store.db.outage import is_unreachable
from celery_durable.store.liveness import ProofOfLife
from celery_durable.store.operation_records import (
    Collected,
    Forked,
    OldestRun,
    PendingSignal,
    Resumed,
    RunAction,
    RunFilter,
    RunStats,
    RunSummary,
    StateKey,
    StatusCount,
)
from celery_durable.store.records import (
    BatchWrite,
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
    OwedReport,
    RunRecord,
    Settled,
    SignalStore,
    SignalTake,
    StepRecord,
    StepWrite,
    attempt_of,
)
from celery_durable.store.schema import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    SETTLED_STATUSES,
    Tables,
    build_tables,
)
from celery_durable.store.sql.build import TAKEOVER
from celery_durable.store.sql.operator_statements import ALL_STATUSES
from celery_durable.store.store import Store

__all__ = [
    "RunAction",
    "ACTIVE_STATUSES",
    "ALL_STATUSES",
    "BatchWrite",
    "Settled",
    "Cancellation",
    "Claim",
    "Collected",
    "DueItem",
    "DueRun",
    "ProofOfLife",
    "OwedReport",
    "FanOut",
    "FanOutState",
    "FINISHED_STATUSES",
    "Forked",
    "ItemClaim",
    "ItemFailure",
    "ItemRow",
    "ItemWrite",
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
    "attempt_of",
    "build_tables",
    "is_unreachable",
]
