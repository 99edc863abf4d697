"""celery_durable: durable, step-persistent workflows on Celery and Postgres."""

from celery_durable.body.context import WorkflowContext
from celery_durable.body.patching import deprecate_patch, patched
from celery_durable.durable import Durable
from celery_durable.errors import (
    ArgumentsRefused,
    ConfigurationError,
    DatabaseUnavailable,
    DuplicateRegistration,
    DurableError,
    InvalidArgument,
    NeverClaimed,
    NonDeterminismError,
    NotSerialisable,
    PayloadTooLarge,
    PendingSignalsFull,
    PermanentError,
    RunLimitExceeded,
    RunNotPublished,
    StepFailed,
    StreamClosed,
    UnknownQuery,
    UpdateNotHandled,
    UpdateRejected,
    WorkerLost,
    WorkflowAlreadyCompleted,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowNotResumable,
)
from celery_durable.fanout.compose import ChildHandle, StepFuture, gather, map
from celery_durable.runs.handle import WorkflowHandle, WorkflowStatus
from celery_durable.runs.task import WorkflowTask
from celery_durable.sagas.compensation import compensate
from celery_durable.sagas.continue_as_new import continue_as_new
from celery_durable.store.engine_names import Compensation
from celery_durable.streams.writing import close_stream, write_stream
from celery_durable.updates.receive import UpdateRequest, wait_for_update
from celery_durable.waits.state import set_state
from celery_durable.waits.suspend import sleep, sleep_until, wait_for_signal

__all__ = [
    "ArgumentsRefused",
    "ChildHandle",
    "Compensation",
    "ConfigurationError",
    "DatabaseUnavailable",
    "DuplicateRegistration",
    "Durable",
    "DurableError",
    "InvalidArgument",
    "NeverClaimed",
    "NonDeterminismError",
    "NotSerialisable",
    "PayloadTooLarge",
    "PendingSignalsFull",
    "PermanentError",
    "RunLimitExceeded",
    "RunNotPublished",
    "StepFailed",
    "StepFuture",
    "StreamClosed",
    "UnknownQuery",
    "UpdateNotHandled",
    "UpdateRejected",
    "UpdateRequest",
    "WorkerLost",
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
    "close_stream",
    "continue_as_new",
    "deprecate_patch",
    "gather",
    "map",
    "patched",
    "set_state",
    "sleep",
    "sleep_until",
    "wait_for_signal",
    "wait_for_update",
    "write_stream",
]
