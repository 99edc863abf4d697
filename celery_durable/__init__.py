"""celery_durable: durable, step-persistent workflows on Celery and Postgres."""

from .context import WorkflowContext
from .errors import (
    ConfigurationError,
    DuplicateRegistration,
    DurableError,
    NonDeterminismError,
    PendingSignalsFull,
    PermanentError,
    StepFailed,
    UnknownQuery,
    WorkflowAlreadyCompleted,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
)
from .extension import Durable
from .handle import WorkflowHandle, WorkflowStatus
from .workflow import WorkflowTask

__all__ = [
    "ConfigurationError",
    "DuplicateRegistration",
    "Durable",
    "DurableError",
    "NonDeterminismError",
    "PendingSignalsFull",
    "PermanentError",
    "StepFailed",
    "UnknownQuery",
    "WorkflowAlreadyCompleted",
    "WorkflowAlreadyExists",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowStatus",
    "WorkflowTask",
]
