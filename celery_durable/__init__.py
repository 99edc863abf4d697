"""celery_durable: durable, step-persistent workflows on Celery and Postgres."""

from .compose import ChildHandle, StepFuture, gather, map
from .context import WorkflowContext
from .errors import (
    ConfigurationError,
    DatabaseUnavailable,
    DuplicateRegistration,
    DurableError,
    InvalidArgument,
    NonDeterminismError,
    NotSerialisable,
    PendingSignalsFull,
    PermanentError,
    StepFailed,
    UnknownQuery,
    WorkflowAlreadyCompleted,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowNotResumable,
)
from .extension import Durable
from .handle import WorkflowHandle, WorkflowStatus
from .state import set_state
from .suspend import sleep, sleep_until, wait_for_signal
from .workflow import WorkflowTask

__all__ = [
    "ChildHandle",
    "ConfigurationError",
    "DatabaseUnavailable",
    "DuplicateRegistration",
    "Durable",
    "DurableError",
    "InvalidArgument",
    "NonDeterminismError",
    "NotSerialisable",
    "PendingSignalsFull",
    "PermanentError",
    "StepFailed",
    "StepFuture",
    "UnknownQuery",
    "WorkflowAlreadyCompleted",
    "WorkflowAlreadyExists",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowNotResumable",
    "WorkflowStatus",
    "WorkflowTask",
    "gather",
    "map",
    "set_state",
    "sleep",
    "sleep_until",
    "wait_for_signal",
]
