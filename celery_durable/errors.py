"""Every error celery_durable raises, in one place.

Example::

    from celery_durable.errors import WorkflowFailed

    try:
        handle.get(timeout=30)
    except WorkflowFailed as exc:
        print(exc.error_type, exc.error_message)
"""

from __future__ import annotations

from typing import Any

from kombu.exceptions import OperationalError


class DurableError(Exception):
    """Base class of celery_durable's own errors."""


class RunIdentified:
    """An error about one run, carrying its id as ``run_id``."""

    run_id: str

    @property
    def workflow_id(self) -> str:
        """The older name of ``run_id``, kept as an alias."""
        return self.run_id


class ConfigurationError(DurableError, ValueError):
    """A setting is missing or out of range; the message names the setting."""


class InvalidArgument(DurableError, ValueError):
    """A run id, idempotency key, signal name or other text the store and the broker
    carry verbatim breaks a rule (length, NUL, UTF-8); the message names the argument,
    the value and the rule. Raised before anything is written or published."""


class DatabaseUnavailable(DurableError):
    """The store's database can't be reached (refused, reset, restarting).

    The message names what failed (workflow and run id) and the database, its URL without
    the password; the driver's error is chained as ``__cause__``. Nothing was written.
    """


class DuplicateRegistration(DurableError, ValueError):
    """Two workflows or two steps were registered under one name."""


class WorkflowNotFound(RunIdentified, DurableError, LookupError):
    """No run with this run id exists in the namespace."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no workflow run with id {run_id!r}")
        self.run_id = run_id


class WorkflowAlreadyExists(RunIdentified, DurableError):
    """A run with this id already exists (pass ``if_exists="return"`` to reuse it)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"a workflow run with id {run_id!r} already exists; "
            'pass if_exists="return" to get its handle instead'
        )
        self.run_id = run_id


class RunNotPublished(RunIdentified, DurableError, OperationalError):
    """``.delay()`` stored the run (PENDING) but could not publish its message (the broker
    is down, its client library missing...). The run exists: a worker's sweeper publishes
    it after ``durable_dispatch_grace``. Starting it again would make a second run; retry
    with ``run_id=exc.run_id, if_exists="return"``, or wait on ``exc.handle``.
    An ``OperationalError``, which Celery's ``.delay()`` raises for a broker that is down;
    the publish's error is chained as ``__cause__``."""

    def __init__(
        self, workflow: str, run_id: str, grace: float, handle: Any, cause: BaseException
    ) -> None:
        super().__init__(
            f"workflow {workflow} run {run_id!r} is stored (PENDING), but publishing "
            f"its message failed ({type(cause).__name__}: {cause}); the sweeper will publish "
            f"it (a worker's, after durable_dispatch_grace={grace:g}s). Don't start it "
            f'again: retry with run_id={run_id!r}, if_exists="return" to get its '
            "handle"
        )
        self.run_id = run_id
        self.handle = handle


class WorkflowAlreadyCompleted(RunIdentified, DurableError):
    """The run has finished (succeeded, failed or was cancelled)."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"workflow run {run_id!r} has already completed ({status})")
        self.run_id = run_id
        self.status = status


class StreamClosed(RunIdentified, DurableError):
    """A value written to a stream that is closed: ``close_stream`` ended it, or its run
    finished."""

    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(
            f"stream {key!r} of workflow run {run_id!r} is closed: nothing more can be "
            "written to it"
        )
        self.run_id = run_id
        self.key = key


class WorkflowNotResumable(RunIdentified, DurableError):
    """Only a FAILED or CANCELLED run can be resumed; ``status`` is the run's."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(
            f"workflow run {run_id!r} can't be resumed: its status is {status}; "
            "only FAILED or CANCELLED runs resume"
        )
        self.run_id = run_id
        self.status = status


class NonDeterminismError(DurableError):
    """Replay reached a step whose name or input differs from the recorded history."""


class PermanentError(DurableError):
    """Raise (or subclass) this in a step or workflow to fail at once, without retries."""


class NotSerialisable(PermanentError, TypeError):
    """An argument, step output or result JSON can't hold; retrying would not help."""


class ArgumentsRefused(PermanentError, TypeError):
    """A workflow message sent by name (``send_task``, ``celery call``, beat, another
    language's client) whose arguments don't fit the workflow's signature, or can't be
    stored. Its run is stored FAILED with this error, so that an operator sees it."""


class PayloadTooLarge(NotSerialisable, ValueError):
    """An argument, result, signal payload or state value is larger, as JSON, than
    ``durable_max_payload_bytes``; the message names it, its size and the setting.
    Refused before anything is written; a permanent error, like NotSerialisable."""


class RunLimitExceeded(PermanentError):
    """A run grew past one of its limits (``durable_max_steps``, ``durable_max_child_depth``,
    ``durable_max_map_items``); the message names the setting and the run. Raised before
    anything over the limit is written; the run fails at once, never retried."""


class WorkerLost(DurableError):
    """The error a run (or a map item) is stored FAILED with when its worker was lost
    ``durable_max_recoveries`` times (out of memory, a crash in native code, SIGKILL): it
    is poison, so it is not run again. Never raised in your process: ``handle.get()``
    raises ``WorkflowFailed`` whose ``error_type`` names this class. Fix the cause, then
    ``durable resume``."""


class NeverClaimed(DurableError):
    """The error a run is stored FAILED with when the sweeper published it
    ``durable_max_dispatches`` times since its last claim and no worker claimed it (every
    worker refused it or died of it, or none consumes its queue). Never raised in your
    process: ``WorkflowFailed.error_type`` names it. Fix the cause, then ``durable resume``."""


class WorkflowFailed(RunIdentified, DurableError):
    """The workflow ended FAILED; carries the stored error's type, message and traceback."""

    def __init__(
        self, run_id: str, error_type: str, error_message: str, error_traceback: str
    ) -> None:
        super().__init__(f"workflow run {run_id!r} failed: {error_type}: {error_message}")
        self.run_id = run_id
        self.error_type = error_type
        self.error_message = error_message
        self.error_traceback = error_traceback


class StepFailed(DurableError):
    """A step failed for good: a remote step or a ``cd.map`` item (after its own retries),
    or a recorded local failure whose exception type cannot be rebuilt.

    Carries the original exception's type, message and traceback; ``item`` is the
    ``cd.map`` item number (0 for a single remote step), None for a local step.
    """

    def __init__(
        self,
        step_name: str,
        error_type: str,
        error_message: str,
        error_traceback: str = "",
        item: int | None = None,
    ) -> None:
        where = "" if item is None else f" (item {item})"
        super().__init__(f"step {step_name}{where} failed: {error_type}: {error_message}")
        self.step_name = step_name
        self.error_type = error_type
        self.error_message = error_message
        self.error_traceback = error_traceback
        self.item = item


class WorkflowCancelled(RunIdentified, BaseException):  # noqa: N818 - the name is public API
    """The run was cancelled.

    A ``BaseException`` on purpose: ``except Exception`` in workflow code must not be able
    to swallow a cancellation.
    """

    def __init__(self, run_id: str, reason: str | None = None) -> None:
        super().__init__(f"workflow run {run_id!r} was cancelled: {reason or 'no reason given'}")
        self.run_id = run_id
        self.reason = reason


class PendingSignalsFull(DurableError):
    """The run already holds ``durable_max_pending_signals`` unconsumed signals."""


class UpdateRejected(RunIdentified, DurableError):
    """``handle.update``: the workflow refused the request, with ``reason``: its body's
    ``req.reject(reason)``, or its validator (then no step of the run records it)."""

    def __init__(self, run_id: str, name: str, reason: str) -> None:
        super().__init__(f"update {name!r} of workflow run {run_id!r} was rejected: {reason}")
        self.run_id = run_id
        self.name = name
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return type(self), (self.run_id, self.name, self.reason)


class UpdateNotHandled(RunIdentified, DurableError):
    """``handle.update``: the run finished (``status``) without answering the request."""

    def __init__(self, run_id: str, name: str, status: str) -> None:
        super().__init__(
            f"update {name!r} of workflow run {run_id!r} was never answered: the run "
            f"finished ({status}) first"
        )
        self.run_id = run_id
        self.name = name
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return type(self), (self.run_id, self.name, self.status)


class UnknownQuery(DurableError, KeyError):
    """``handle.query(key)`` for a key the workflow never set."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown query"


class LeaseLost(BaseException):  # noqa: N818
    """Internal: this worker no longer owns the run; it must stop without writing."""


class Suspended(BaseException):  # noqa: N818
    """Internal: the run now waits (signal or timer); the task returns, freeing its slot."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreUnavailable(BaseException):  # noqa: N818
    """Internal: a database write failed inside the body; ``except Exception`` in workflow
    code must not swallow it. The run is left to its lease: the sweeper resumes it."""


class ContinuedAsNew(BaseException):  # noqa: N818
    """Internal: ``continue_as_new`` ends this generation; ``args`` is the next one's
    encoded ``[args, kwargs]``."""

    def __init__(self, args: str) -> None:
        super().__init__("continued as new")
        self.args_encoded = args
