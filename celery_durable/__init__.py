"""celery_durable: durable, step-persistent workflows on Celery and Postgres."""

from .compensation import Compensation, compensate
from .compose import ChildHandle, StepFuture, gather, map
from .context import WorkflowContext
from .continuation import continue_as_new
from .errors import (
    ConfigurationError,
    DatabaseUnavailable,
    DuplicateRegistration,
    DurableError,
    InvalidArgument,
    NonDeterminismError,
    NotSerialisable,
    PayloadTooLarge,
    PendingSignalsFull,
    PermanentError,
    RunNotPublished,
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
from .patching import deprecate_patch, patched
from .state import set_state
from .suspend import sleep, sleep_until, wait_for_signal
from .workflow import WorkflowTask

__all__ = [
    "ChildHandle",
    "Compensation",
    "ConfigurationError",
    "DatabaseUnavailable",
    "DuplicateRegistration",
    "Durable",
    "DurableError",
    "InvalidArgument",
    "NonDeterminismError",
    "NotSerialisable",
    "PayloadTooLarge",
    "PendingSignalsFull",
    "PermanentError",
    "RunNotPublished",
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
    "compensate",
    "continue_as_new",
    "deprecate_patch",
    "gather",
    "map",
    "patched",
    "set_state",
    "sleep",
    "sleep_until",
    "wait_for_signal",
]
