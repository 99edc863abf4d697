"""WorkflowHandle: look at, wait for and steer one workflow run.

Example::

    handle = checkout.delay(42)
    handle.id                  # the run id, which is also the Celery task id
    handle.status()            # WorkflowStatus.RUNNING
    handle.get(timeout=30)     # the return value; WorkflowFailed if the run failed
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from celery import Task, states
from celery.backends.base import DisabledBackend
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult

from celery_durable.core import serialization, validate
from celery_durable.core.logs import run_fields
from celery_durable.core.off_loop import off_loop
from celery_durable.engine.cancel import cancel
from celery_durable.engine.publish import publish_woken
from celery_durable.engine.runtime import runtime_of
from celery_durable.errors import (
    WorkflowAlreadyCompleted,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
)
from celery_durable.runs.handle_hooks import HANDLE_HOOKS, needed
from celery_durable.runs.stored_runs import fork_run, resume_run
from celery_durable.store import FINISHED_STATUSES, DueRun, RunRecord, StepRecord
from celery_durable.store.db.outage import describe, is_unreachable, summary, unavailable
from celery_durable.store.engine_names import CELERY_STATES, Compensation

if TYPE_CHECKING:
    from celery_durable.engine.runtime import HasRuntime, Runtime

logger = logging.getLogger("celery_durable.handle")

# With LISTEN, ``aget`` reads the run when a notification says it changed, and at least
# this often (seconds): a last resort, should a change ever go unnotified.
AWAIT_SAFETY_READ = 10.0
# ``update`` and ``aupdate`` read the request at least this often (seconds), notified or
# not: a run the sweeper ends (a lost worker's) sends no notification.
UPDATE_SAFETY_READ = 1.0


def canvas_member(task: Any, task_id: str, options: dict[str, Any]) -> AsyncResult:
    """What a group or chain of workflows holds for a member (``WorkflowTask.AsyncResult``):
    with a result backend, Celery's result, read there (a chord counts its parts in it);
    without one, the run's handle, which reads the store and waits for a run that a chain
    has not started yet."""
    if not isinstance(task.backend, DisabledBackend):
        return Task.AsyncResult(task, task_id, **options)
    return WorkflowHandle(task.runtime, task_id, task.name, awaited=True)


class WorkflowStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)

    def __str__(self) -> str:
        return self.value


class WorkflowHandle(AsyncResult):  # type: ignore[misc]
    """A reference to one run, by run id; cheap to create, reads the database.

    It is Celery's ``AsyncResult`` of the run's task id too: ``.state``, ``.ready()``,
    ``.successful()``, ``.failed()``, ``.result``, ``.traceback``, ``.get()`` and
    ``.revoke()`` read and steer the run in the store (no result backend needed), and a
    ``group`` or ``chord`` of workflows joins them through the app's result backend,
    where each run's final state is stored when it settles.
    """

    def __init__(
        self,
        durable: Runtime | HasRuntime,
        run_id: str,
        name: str | None = None,
        *,
        awaited: bool = False,
    ) -> None:
        validate.check_run_id(run_id)
        runtime = runtime_of(durable)
        super().__init__(run_id, app=runtime.app)
        self.runtime = runtime
        self._workflow_name = name
        # A canvas member's handle: get() and wait() wait for the run to be inserted too
        # (a chain's later workflow starts when the one before it finishes).
        self._awaited = awaited

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name or 'workflow'} id={self.id!r}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WorkflowHandle)
            and other.id == self.id
            and other.runtime is self.runtime
        )

    def __hash__(self) -> int:
        return hash(self.id)

    def __reduce__(self) -> Any:
        # As an AsyncResult (a result passed to a task is rebuilt from its id there).
        return AsyncResult, (self.id, None, self.name)

    @property
    def name(self) -> str | None:
        """The workflow's registered name, when the handle was given it."""
        return self._workflow_name

    @name.setter
    def name(self, value: str | None) -> None:
        self._workflow_name = value

    @property
    def run_id(self) -> str:
        return str(self.id)

    @property
    def workflow_id(self) -> str:
        """The older name of ``run_id``, kept as an alias."""
        return str(self.id)

    @property
    def task_id(self) -> str:
        return str(self.id)

    @property
    def state(self) -> str:
        """Celery's state name: PENDING, STARTED (running), WAITING (suspended: a signal,
        a timer, items or a child), RETRY (pending after a failed attempt), SUCCESS,
        FAILURE or REVOKED (cancelled)."""
        run = self.record()
        if run.status == WorkflowStatus.PENDING and run.attempts and run.error is not None:
            return states.RETRY
        return CELERY_STATES[run.status]

    @property
    def result(self) -> Any:
        """The return value once it succeeded; the WorkflowFailed (or WorkflowCancelled)
        that ``get()`` raises once it failed (or was cancelled); None before."""
        run = self.record()
        if run.status == WorkflowStatus.SUCCEEDED:
            return serialization.loads(run.result) if run.result is not None else None
        if run.status in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED):
            return self._outcome_error(run)
        return None

    info = result

    @property
    def traceback(self) -> str | None:
        """The stored traceback of the failure that ended the run; None otherwise."""
        run = self.record()
        if run.status != WorkflowStatus.FAILED or not run.error:
            return None
        return str(serialization.decode_error(run.error).get("traceback") or "") or None

    def revoke(
        self,
        connection: Any = None,
        terminate: bool = False,
        signal: str | None = None,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Celery's revoke: cancel the run (a finished one is left as it is, as Celery
        leaves a finished task). ``terminate=True`` also stops the step running now, by
        Celery's own revoke of the task id (``signal``: SIGTERM unless given); the run is
        then settled CANCELLED, its compensations run."""
        try:
            self.cancel("revoked")
        except WorkflowAlreadyCompleted:
            return
        if terminate:
            self.app.control.revoke(
                self.id,
                connection=connection,
                terminate=True,
                signal=signal or "SIGTERM",
                reply=wait,
                timeout=timeout,
            )

    def forget(self) -> None:
        """Remove the run's state from the result backend (the run's row stays until
        ``durable gc``); nothing to do without a backend."""
        self._cache = None
        if not isinstance(self.backend, DisabledBackend):
            self.backend.forget(self.id)

    @contextmanager
    def _outage_named(self, what: str) -> Iterator[None]:
        """An unreachable database becomes DatabaseUnavailable naming this run."""
        try:
            yield
        except Exception as exc:
            if is_unreachable(exc):
                raise unavailable(exc, self.runtime.store.url, f"{what} {self.id!r}") from exc
            raise

    def record(self) -> RunRecord:
        """The run's row; WorkflowNotFound if there is none. ``attempts`` counts the attempts
        used up (a wait or a cold shutdown gives its attempt back); ``attempt`` is the one
        the run is on or ended on, which ``durable show`` prints."""
        with self._outage_named("reading workflow run"):
            run = self.runtime.store.get_run(self.id)
        if run is None:
            raise WorkflowNotFound(self.id)
        return run

    def steps(self) -> list[StepRecord]:
        """The recorded steps, in order: name, status ("ok", "error", "retry", "waiting"),
        input, output, error, duration (seconds), ``started_at`` (epoch seconds, the
        database's clock) and ``attempt`` (the run's attempt that ran it). Example:
        ``[s.name for s in h.steps()]``.
        """
        with self._outage_named("reading the steps of workflow run"):
            if self.runtime.store.get_status(self.id) is None:
                raise WorkflowNotFound(self.id)
            recorded = self.runtime.store.load_steps(self.id)
        return [recorded[idx] for idx in sorted(recorded)]

    def status(self) -> WorkflowStatus:
        with self._outage_named("reading the status of workflow run"):
            status = self.runtime.store.get_status(self.id)
        if status is None:
            raise WorkflowNotFound(self.id)
        return WorkflowStatus(status)

    def ready(self) -> bool:
        """Whether the run finished (succeeded, failed for good or was cancelled)."""
        return self.status().finished

    def wait(self, timeout: float | None = None, interval: float = 0.5) -> WorkflowStatus:
        """Block until the run finishes; ``celery.exceptions.TimeoutError`` after ``timeout``.

        A timeout only stops waiting: the run goes on.
        """
        return WorkflowStatus(self._wait_finished(timeout, interval).status)

    def get(  # type: ignore[override]
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        **celery_options: Any,
    ) -> Any:
        """The run's return value, once it finished.

        Raises WorkflowFailed (with the stored type, message and traceback),
        WorkflowCancelled, or ``celery.exceptions.TimeoutError``; with
        ``propagate=False`` returns that error instead of raising it. The other options
        of ``AsyncResult.get`` (``no_ack``, ``on_message``, ...) are accepted and have no
        effect: the run is read from the database, not from the result backend.
        """
        return self._outcome(self._wait_finished(timeout, interval), propagate)

    def _outcome(self, run: RunRecord, propagate: bool) -> Any:
        """What ``get`` gives for a finished run: its value, or its error raised."""
        if run.status == WorkflowStatus.SUCCEEDED:
            return serialization.loads(run.result) if run.result is not None else None
        error = self._outcome_error(run)
        if not propagate:
            return error
        raise error

    def _outcome_error(self, run: RunRecord) -> BaseException:
        if run.status == WorkflowStatus.CANCELLED:
            return WorkflowCancelled(self.id, run.cancel_reason)
        error = serialization.decode_error(run.error) if run.error else {}
        return WorkflowFailed(
            self.id,
            error.get("type", "unknown"),
            error.get("message", ""),
            error.get("traceback", ""),
        )

    def signal(self, name: str, payload: Any = None, idempotency_key: str | None = None) -> bool:
        """Store a signal for this run (before returning) and wake it if it waits for it.

        Returns False when ``idempotency_key`` was already used for this run (a no-op).
        Raises WorkflowNotFound, WorkflowAlreadyCompleted or PendingSignalsFull.
        """
        with self._outage_named(f"signalling {name!r} to workflow run"):
            send = needed(HANDLE_HOOKS.signal, "signal")
            return send(self.runtime, self.id, name, payload, idempotency_key)

    def query(self, key: str = "state", wait: float | None = None) -> Any:
        """The latest value the run stored with ``set_state(value, key)``, from the database.

        For "state" before any ``set_state``: the output of the last finished step.
        Raises UnknownQuery for a key never set. With ``wait`` (seconds): block until the
        run sets ``key`` (woken by LISTEN/NOTIFY on Postgres, polling on SQLite); raises
        ``celery.exceptions.TimeoutError`` after ``wait`` seconds, and WorkflowFailed or
        WorkflowCancelled if the run ends without setting it.
        """
        with self._outage_named(f"querying {key!r} of workflow run"):
            if wait is None:
                return needed(HANDLE_HOOKS.query, "query")(self.runtime.store, self.id, key)
            seconds = validate.parse_duration(wait, "query(wait)")
            wait_for = needed(HANDLE_HOOKS.wait_for_state, "wait_for_state")
            return wait_for(self.runtime.store, self.id, key, seconds)

    def read_stream(
        self,
        key: str,
        start: int = 0,
        timeout: float | None = None,
        with_offsets: bool = False,
    ) -> Iterator[Any]:
        """The values the run writes to its stream ``key`` (``write_stream``), from offset
        ``start``, yielded as they are written, from any process; the iterator ends when
        the stream is closed or the run finished. ``with_offsets``: ``(offset, value)``
        pairs; a reader that starts again at the offset after the last it saw loses
        nothing and sees nothing twice. ``timeout``: seconds to wait for each next value,
        then ``celery.exceptions.TimeoutError`` (the run goes on). Woken by LISTEN/NOTIFY
        on Postgres, polling on SQLite. WorkflowNotFound if there is no such run."""
        read = needed(HANDLE_HOOKS.read_stream, "read_stream")
        return read(self.runtime.store, self.id, key, start, timeout, with_offsets)

    def aread_stream(
        self,
        key: str,
        start: int = 0,
        timeout: float | None = None,
        with_offsets: bool = False,
    ) -> AsyncIterator[Any]:
        """``read_stream`` for asyncio (``async for value in handle.aread_stream(key)``):
        the same values and errors; each read runs on a client thread, and between reads
        it waits on the event loop's notification for the run."""
        read = needed(HANDLE_HOOKS.aread_stream, "aread_stream")
        return read(self.runtime.store, self.id, key, start, timeout, with_offsets)

    def update(
        self,
        name: str,
        payload: Any = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send the run the update request ``name`` and return its answer: the value the
        body's ``req.reply(value)`` gave (``cd.wait_for_update(name)`` takes it).

        Raises UpdateRejected (with the body's or the validator's ``reason``),
        UpdateNotHandled if the run finishes without answering, WorkflowNotFound, or
        WorkflowAlreadyCompleted for a run that had finished before it was sent; and
        ``celery.exceptions.TimeoutError`` after ``timeout`` seconds (None: no limit). A
        timeout only stops waiting: the request stays, and the run may still take and
        answer it. Send it again with the same ``idempotency_key`` to wait for that very
        request (and its answer) instead of sending a second one. On Postgres a
        notification wakes the caller when the answer is stored.
        """
        wait = _UpdateWait(self, name, timeout)
        send, look = wait.hooks()
        with (
            self._outage_named(f"sending update {name!r} to workflow run"),
            self.runtime.store.listener() as listener,
        ):
            # Listening before the request is stored: no answer can come unnoticed.
            update_id = send(self.runtime, self.id, name, payload, idempotency_key)
            while True:
                answered, value, status = look(self.runtime.store, self.id, update_id)
                if answered:
                    return value
                listener.wait_for(self.id, wait.next_read(status))

    async def aupdate(
        self,
        name: str,
        payload: Any = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """``update``, awaited: the same answer and errors. The request is stored and each
        read runs on a client thread; between reads it waits on a notification for the
        run on the event loop (Postgres), not on the thread."""
        wait = _UpdateWait(self, name, timeout)
        send, look = wait.hooks()
        store = self.runtime.store
        with self._outage_named(f"sending update {name!r} to workflow run"):
            async with store.watching(self.id) as changes:
                # Watching before the request is stored: no answer can come unnoticed.
                runtime, key = self.runtime, idempotency_key
                update_id = await off_loop(send, runtime, self.id, name, payload, key)
                while True:
                    answered, value, status = await off_loop(look, store, self.id, update_id)
                    if answered:
                        return value
                    await changes.wait(wait.next_read(status))

    def compensations(self) -> list[Compensation]:
        """The compensations that ran (rolled back steps, latest first), each with its
        step's name and index and "ok" or "error"; ``record().compensation`` says how
        the rollback ended ("compensated", "compensation failed", or None)."""
        return [c for c in map(Compensation.of, self.steps()) if c is not None]

    def cancel(self, reason: str | None = None) -> WorkflowStatus:
        """Cancel the run: at once if pending or waiting, at its next step if running.
        Its pending items never run; its children are cancelled too (not detached ones).

        Raises WorkflowAlreadyCompleted for a finished run.
        """
        validate.check_text(reason, "cancel(reason)", allow_none=True)
        with self._outage_named("cancelling workflow run"):
            cancelled = cancel(self.runtime, self.id, reason)
        if cancelled.status is None:
            raise WorkflowNotFound(self.id)
        if not cancelled.requested:
            raise WorkflowAlreadyCompleted(self.id, cancelled.status)
        logger.info(
            "workflow %s run %s: cancellation requested (%s); now %s",
            self.name,
            self.id,
            reason or "no reason given",
            cancelled.status,
            extra=run_fields(self.id, self.name),
        )
        if cancelled.status == WorkflowStatus.PENDING:
            self._publish_rollback()
        return WorkflowStatus(cancelled.status)

    def _publish_rollback(self) -> None:
        """A saga cancelled while idle waits for a worker to roll it back: publish it now
        (if this fails, the sweeper publishes it within a poll interval)."""
        run = self.runtime.store.get_run(self.id)
        if run is not None and run.status == WorkflowStatus.PENDING:
            publish_woken(
                self.runtime,
                DueRun(run.id, run.name, run.status, run.args, run.queue),
                "its cancel rolls it back",
            )

    def resume(self, timeout: Any = None) -> WorkflowStatus:
        """Continue a FAILED or CANCELLED run from its first unfinished step, with a fresh
        attempt budget: it becomes PENDING and is published like any dispatch, so it runs
        on today's code through the normal claim (never twice). Its recorded steps stay,
        except the failed step that ended it, which runs again.

        Raises WorkflowNotResumable (naming the status) for any other run. ``timeout``:
        its new deadline from now (its old one, if any, is gone).
        Example: ``durable.get_handle("order-42").resume()`` after deploying a fix.
        """
        with self._outage_named("resuming workflow run"):
            resume_run(self.runtime, self.id, timeout)
        return WorkflowStatus.PENDING

    def fork(
        self,
        from_step: int,
        run_id: str | None = None,
        timeout: Any = None,
        *,
        workflow_id: str | None = None,
    ) -> WorkflowHandle:
        """Start a new run of this workflow, with the same arguments, that keeps this run's
        steps before ``from_step`` (0-based, as ``durable show`` numbers them) and runs the
        rest on today's code; it records this run as its origin (``forked_from``). It
        takes a copy of this run's unconsumed signals (this run keeps its own); a signal a
        step from ``from_step`` on consumed is not sent again: resend it to the fork.

        ``run_id`` names the new run (default: a new id; ``workflow_id``: its older
        name). Raises InvalidArgument when ``from_step`` is beyond this run's finished
        steps, WorkflowAlreadyExists for a taken id. ``timeout``: the new run's deadline from now.
        Example: ``handle.fork(from_step=2).get(timeout=30)``.
        """
        with self._outage_named("forking workflow run"):
            new_id = validate.chosen_run_id("fork", run_id=run_id, workflow_id=workflow_id)
            forked = fork_run(self.runtime, self.id, from_step, new_id, timeout)
        assert forked.run is not None  # a refused fork raised
        return WorkflowHandle(self.runtime, forked.run.id, forked.run.name)

    def _wait_finished(self, timeout: float | None, interval: float) -> RunRecord:
        """Read the run until it finished; an unreachable database (a restart) is retried
        until ``timeout``, like a run that is still going."""
        wait = _FinishWait(self, timeout)
        with self.runtime.store.listener() as listener:
            while True:
                with wait.reading():
                    wait.run = self.record()
                if wait.finished is not None:
                    return wait.finished
                remaining = wait.remaining()
                listener.wait_for(
                    self.id, interval if remaining is None else min(interval, remaining)
                )

    # -- from asyncio ---------------------------------------------------------------------
    # Each is awaitable and never blocks the event loop. Reads (aget, astatus, aquery's
    # waits) go through psycopg's AsyncConnection on Postgres and a notification wakes
    # them; writes (asignal, acancel) run the sync method on a client thread
    # (``core.off_loop``), so that the two can't drift apart.

    async def aget(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float | None = None,
        **celery_options: Any,
    ) -> Any:
        """``get``, awaited: the run's return value once it finished; WorkflowFailed,
        WorkflowCancelled or ``celery.exceptions.TimeoutError`` as ``get`` raises them.

        On Postgres it waits on a notification (the event loop's one LISTEN connection),
        not a poll: the run is read again when its row changes. ``interval``: the
        longest wait between two reads (default: ``AWAIT_SAFETY_READ`` seconds with LISTEN,
        a last resort; elsewhere, SQLite or PgBouncer without ``durable_listen_url``, a
        poll growing to a quarter of a second).
        """
        return self._outcome(await self._await_finished(timeout, interval), propagate)

    async def astatus(self) -> WorkflowStatus:
        """``status``, awaited (psycopg's AsyncConnection on Postgres)."""
        with self._outage_named("reading the status of workflow run"):
            status = await self.runtime.store.aget_status(self.id)
        if status is None:
            raise WorkflowNotFound(self.id)
        return WorkflowStatus(status)

    async def asignal(
        self, name: str, payload: Any = None, idempotency_key: str | None = None
    ) -> bool:
        """``signal``, awaited (it runs on a client thread): stored before it returns,
        False for an ``idempotency_key`` already used; the same errors."""
        return await off_loop(self.signal, name, payload, idempotency_key)

    async def acancel(self, reason: str | None = None) -> WorkflowStatus:
        """``cancel``, awaited (it runs on a client thread); the same errors."""
        return await off_loop(self.cancel, reason)

    async def aquery(self, key: str = "state", wait: float | None = None) -> Any:
        """``query``, awaited: the same value and errors. Each read runs on a client
        thread; with ``wait``, between reads it waits on a notification for the run
        (``set_state`` notifies) on the event loop, not on the thread."""
        if wait is None:
            return await off_loop(self.query, key)
        seconds = validate.parse_duration(wait, "query(wait)")
        deadline = time.monotonic() + seconds
        validate.check_text(key, "query(key)", max_chars=255, allow_empty=False)
        look = needed(HANDLE_HOOKS.look_for_state, "look_for_state")
        async with self.runtime.store.watching(self.id) as changes:
            while True:
                # One look: the value, or the error that ends the wait (WorkflowFailed...).
                with self._outage_named(f"querying {key!r} of workflow run"):
                    found, value, status = await off_loop(look, self.runtime.store, self.id, key)
                if found:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CeleryTimeoutError(
                        f"workflow run {self.id!r} did not set {key!r} within {seconds}s "
                        f"(status {status}); it goes on running"
                    )
                await changes.wait(min(remaining, AWAIT_SAFETY_READ))

    async def _arecord(self) -> RunRecord:
        """``record``, awaited."""
        with self._outage_named("reading workflow run"):
            run = await self.runtime.store.aget_run(self.id)
        if run is None:
            raise WorkflowNotFound(self.id)
        return run

    async def _await_finished(self, timeout: float | None, interval: float | None) -> RunRecord:
        """``_wait_finished`` on the event loop: read the run each time it may have changed
        until it finished; an unreachable database is retried until ``timeout``."""
        wait = _FinishWait(self, timeout)
        async with self.runtime.store.watching(self.id) as changes:
            while True:
                with wait.reading():
                    wait.run = await self._arecord()
                if wait.finished is not None:
                    return wait.finished
                remaining = wait.remaining()
                # A canvas member's run not inserted yet, or an outage: no notification
                # says when that changes, so poll (an insert notifies no one).
                polled = wait.run is None or wait.unreachable is not None
                pause = interval
                if pause is None:
                    pause = 0.5 if polled or not changes.notified else AWAIT_SAFETY_READ
                await changes.wait(pause if remaining is None else min(pause, remaining))


class _UpdateWait:
    """One wait for an update's answer (``update`` and ``aupdate``): how long it may
    still wait, and the wing's hooks it sends and looks with."""

    def __init__(self, handle: WorkflowHandle, name: str, timeout: float | None) -> None:
        self.handle = handle
        self.name = name
        self.seconds = (
            None if timeout is None else validate.parse_duration(timeout, "update(timeout)")
        )
        self.deadline = None if self.seconds is None else time.monotonic() + self.seconds

    @staticmethod
    def hooks() -> tuple[Any, Any]:
        """The wing's send and look (``HANDLE_HOOKS.send_update``, ``.look_for_answer``)."""
        send = needed(HANDLE_HOOKS.send_update, "send_update")
        return send, needed(HANDLE_HOOKS.look_for_answer, "look_for_answer")

    def next_read(self, status: str) -> float:
        """Seconds until the next read of the answer; Celery's TimeoutError once the
        caller's timeout has run out (``status``: the run's, for the message)."""
        if self.deadline is None:
            return UPDATE_SAFETY_READ
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CeleryTimeoutError(
                f"update {self.name!r} of workflow run {self.handle.id!r}: no answer within "
                f"{self.seconds}s (the run is {status}); the request stays and may still be "
                "answered: send it again with the same idempotency_key to wait for its answer"
            )
        return min(UPDATE_SAFETY_READ, remaining)


class _FinishWait:
    """One wait for a run to finish (``get`` and ``aget``): what it has seen of the run,
    its row or an outage, and how long it may still wait."""

    def __init__(self, handle: WorkflowHandle, timeout: float | None) -> None:
        self.handle = handle
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.run: RunRecord | None = None
        self.unreachable: BaseException | None = None

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around one read of the row, which sets ``run``: a canvas member's missing row is
        waited for, an unreachable database retried; any other error is raised."""
        try:
            yield
        except WorkflowNotFound:
            if not self.handle._awaited:
                raise
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            self.unreachable = exc
        else:
            self.unreachable = None

    @property
    def finished(self) -> RunRecord | None:
        """The run's row, once read and finished."""
        run = self.run
        if self.unreachable is None and run is not None and run.status in FINISHED_STATUSES:
            return run
        return None

    def remaining(self) -> float | None:
        """Seconds left to wait (None: no timeout); Celery's TimeoutError once none are."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CeleryTimeoutError(self.timed_out())
        return left

    def timed_out(self) -> str:
        """Why the wait ended without the run's outcome."""
        run_id, run, unreachable, timeout = self.handle.id, self.run, self.unreachable, self.timeout
        if unreachable is None and run is not None:
            return (
                f"workflow run {run_id!r} did not finish within {timeout}s "
                f"(status {run.status}); it goes on running"
            )
        if unreachable is None:
            return (
                f"workflow run {run_id!r} did not start within {timeout}s: the tasks "
                "before it in its canvas have not finished"
            )
        seen = "never read" if run is None else f"last seen {run.status}"
        cause = f" ({summary(unreachable)})"
        return (
            f"workflow run {run_id!r}: no answer within {timeout}s: the database "
            f"{describe(self.handle.runtime.store.url)} was unreachable{cause}; the run was {seen}"
        )
