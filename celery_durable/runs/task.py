"""The workflow task: start (insert, then publish), start as a child, and deliveries (run
in ``execution``: claim, replay, settle).

Example::

    @durable.workflow(queue="orders", max_attempts=5)
    def checkout(order_id: int) -> dict:
        item = reserve(order_id)
        return {"receipt": charge(order_id, item["amount"])}

    handle = checkout.apply_async(args=(42,), run_id="order-42")
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.result import AsyncResult
from sqlalchemy.orm import Session

from celery_durable.body.context import WorkflowContext
from celery_durable.core import serialization, tracing, validate
from celery_durable.core.ids import time_ordered_id
from celery_durable.core.logs import log_started, run_fields
from celery_durable.core.off_loop import off_loop
from celery_durable.engine.deadlines import deadline_of
from celery_durable.engine.definition import WorkflowDefinition
from celery_durable.engine.delivery import (
    TRANSACTIONAL_HEADER,
    ClaimUnavailable,
    execute,
    request_header,
)
from celery_durable.engine.publish import STORED_HEADER, publish_or_leave
from celery_durable.errors import (
    InvalidArgument,
    RunNotPublished,
    WorkflowAlreadyExists,
)
from celery_durable.runs.dedup import Dedup
from celery_durable.runs.handle import WorkflowHandle, canvas_member
from celery_durable.runs.redelivery import redeliver_later
from celery_durable.runs.starting import publish_after_commit, start_delay_of
from celery_durable.store import NewRun
from celery_durable.store.db.foreign import ForeignTransaction, after_commit, caller_transaction
from celery_durable.store.db.outage import is_unreachable, unavailable

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from celery_durable.body.step import Started
    from celery_durable.engine.runtime import Runtime
    from celery_durable.engine.start_hooks import RunInsert

logger = logging.getLogger("celery_durable.workflow")


class WorkflowTask(Task):  # type: ignore[misc]
    """Base class of every workflow's Celery task."""

    runtime: Runtime
    definition: WorkflowDefinition
    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True
    typing = False
    # Reports each delivery to Flower truthfully (WAITING, not SUCCESS; see taskevents).
    Request = "celery_durable.engine.taskevents:WorkflowRequest"

    # -- updates -----------------------------------------------------------------------

    def validator(self, name: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
        """Register the validator of update ``name``: called with each request's payload
        in the worker, when the body's ``wait_for_update(name)`` takes it and before
        anything is recorded; raising refuses it (the caller gets UpdateRejected with the
        error's message) and leaves no step in the run's history.

        Example::

            @checkout.validator("add_item")
            def check_item(item: dict) -> None:
                if item["qty"] <= 0:
                    raise ValueError("qty must be positive")
        """
        validate.check_signal_name(name, "validator(name)")

        def register(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            if not callable(fn):
                raise TypeError(f"validator({name!r}) decorates a function, got {fn!r}")
            self.definition.validators[name] = fn
            return fn

        return register

    # -- start -------------------------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> WorkflowHandle:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> WorkflowHandle:
        """``delay``, awaited without blocking the event loop: ``aapply_async(args, kwargs)``."""
        return await self.aapply_async(args, kwargs)

    async def aapply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, **options: Any
    ) -> WorkflowHandle:
        """``apply_async``, awaited without blocking the event loop: the same options,
        handle, dedup and errors, for it runs ``apply_async`` itself on a client thread
        (``core.off_loop``; the insert and the broker's publish block there). That thread
        is not the caller's: a framework's transaction open in the calling thread is not
        joined (pass ``connection=``). Cancelling the await does not cancel the start."""
        return await off_loop(self.apply_async, args, kwargs, task_id, **options)

    def AsyncResult(self, task_id: str, **options: Any) -> AsyncResult:  # noqa: N802 - Celery's
        """A canvas member's result: without a result backend, the run's handle."""
        return canvas_member(self, task_id, options)

    def apply_async(  # type: ignore[override]
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        *,
        run_id: str | None = None,
        workflow_id: str | None = None,
        if_exists: str | None = None,
        connection: Connection | Session | ForeignTransaction | None = None,
        **options: Any,
    ) -> WorkflowHandle:
        """Insert the run, then publish it; returns a ``WorkflowHandle``.

        ``run_id`` (or Celery's ``task_id``; ``workflow_id`` is its older name, kept)
        names the run; a taken id raises
        WorkflowAlreadyExists unless ``if_exists="return"``. ``dedup_key``: while a run of
        this workflow with that key is active, its handle comes back instead (raises with
        ``if_exists="error"``); ``debounce`` (seconds) with it: until that run starts,
        each call moves its start that far and gives it this call's arguments
        (``debounce_max_wait`` caps the delay). With ``connection`` (a SQLAlchemy
        Connection or Session) the run is inserted in the caller's transaction and
        published only once it commits. Without one, inside a framework's open transaction
        on the store's database (Django's ``atomic()``), the same holds for that one.
        """
        runtime, definition = self.runtime, self.definition
        dedup = Dedup.from_options(f"workflow {definition.name}", options)
        if if_exists is None:
            if_exists = "return" if dedup.key is not None else "error"
        if if_exists not in ("error", "return"):
            raise ValueError(
                f'workflow {definition.name}: if_exists must be "error" or "return", '
                f"got {if_exists!r}"
            )
        where = f"workflow {definition.name}"
        chosen = validate.chosen_run_id(
            where, run_id=run_id, workflow_id=workflow_id, task_id=task_id
        )
        run_id = chosen or time_ordered_id()
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        run = dataclasses.replace(self._new_run(args, kwargs, options)(run_id), dedup_key=dedup.key)
        insert = runtime.start_hooks.insert(runtime, definition, args, kwargs)
        if connection is None:
            connection = caller_transaction(runtime.config)
        bind = connection.connection() if isinstance(connection, Session) else connection
        for _ in range(2):  # a dedup key's run that ended between the insert and the look
            inserted, slotted = self._insert(insert, run, bind)
            existing = None if inserted else dedup.existing(runtime, definition.name, run.args)
            if inserted or existing is not None or dedup.key is None:
                break
        if not inserted:
            taken = existing or run_id
            if if_exists == "return":
                return WorkflowHandle(runtime, taken, definition.name)
            raise WorkflowAlreadyExists(taken)
        tracing.add_start_headers(options)  # the caller's trace goes on in the first attempt
        handle = WorkflowHandle(runtime, run_id, definition.name)
        log_started(definition.name, run_id, run.start_delay)
        if run.start_delay is not None:
            return handle  # the sweeper publishes it when due: no long ETA message
        if not slotted:
            return handle  # it waits for a slot, with no message: a hand-off publishes it
        if connection is None:
            self._publish_started(args, kwargs, run_id, options, handle)
        else:
            options.setdefault("headers", {})[TRANSACTIONAL_HEADER] = True
            publish_after_commit(
                connection, lambda: self._publish_started(args, kwargs, run_id, options)
            )
        return handle

    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """Celery's ``DjangoTask.delay_on_commit``: ``apply_async_on_commit(args, kwargs)``."""
        self.apply_async_on_commit(args, kwargs)

    def apply_async_on_commit(self, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        """Celery's ``DjangoTask.apply_async_on_commit``: the whole start (insert and
        publish) waits until the host framework's open transaction commits (Django's, on
        the store's alias), and never happens if it rolls back; returns None, as Celery's
        does. ``.delay()`` inside ``atomic()`` already commits or rolls back with it."""

        def start() -> None:
            self.apply_async(args, kwargs, **options)

        defer = after_commit(self.runtime.config)
        if defer is None:
            start()
        else:
            defer(start)

    def start_in(
        self,
        conn: Connection,
        run_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any],
    ) -> Callable[[], None] | None:
        """Insert the run on ``conn``, in the caller's transaction (a schedule's firing);
        returns what publishes it once that has committed (None: the id was taken). A
        publish lost with its process is the sweeper's after the dispatch grace."""
        options = dict(options)
        run = self._new_run(args, kwargs, options)(run_id)
        insert = self.runtime.start_hooks.insert(self.runtime, self.definition, args, kwargs)
        inserted, slotted = insert(run, conn)
        if not inserted:
            return None

        def publish() -> None:
            log_started(self.definition.name, run_id, run.start_delay)
            if run.start_delay is None and slotted:
                self._publish_started(args, kwargs, run_id, options)

        return publish

    def _insert(
        self, insert: RunInsert, run: NewRun, bind: Connection | ForeignTransaction | None
    ) -> tuple[bool, bool]:
        """(inserted, to publish now): a limited run takes its slot in the same transaction."""
        runtime = self.runtime
        try:
            return insert(run, bind)
        except Exception as exc:
            if bind is None and is_unreachable(exc):  # the caller's connection: theirs to report
                what = f"workflow {self.definition.name} run {run.id!r} was not started"
                raise unavailable(exc, runtime.store.url, what) from exc
            raise

    def start_child(
        self,
        *args: Any,
        run_id: str | None = None,
        workflow_id: str | None = None,
        detached: bool = False,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> Started[Any]:
        """Inside a workflow: start this workflow as a child run; returns a ChildHandle.

        Its id is derived from the parent's id and step index unless ``run_id`` is
        given (``workflow_id``: its older name, kept). Cancelling the parent cancels the
        child, unless ``detached=True``. Other options (``queue``, ``countdown``, ...) are
        those of ``apply_async``.
        """
        run_id = validate.chosen_run_id(
            f"{self.definition.name}.start_child", run_id=run_id, workflow_id=workflow_id
        )
        call_args, call_kwargs = tuple(args), dict(kwargs or {})
        parent = WorkflowContext.current()
        deadline = None if parent is None else deadline_of(parent)
        if "timeout" not in options and deadline is not None:
            # A child inherits what is left of its parent's deadline (or its own, if sooner).
            left = max(0.0, deadline - time.time())
            own = self.definition.timeout
            options["timeout"] = left if own is None else min(left, own)
        new_run = self._new_run(call_args, call_kwargs, options)

        def publish(child_id: str) -> None:
            child_options = dict(options)
            tracing.add_start_headers(child_options)  # a child span of the parent's step
            self._publish_started(call_args, call_kwargs, child_id, child_options)

        encoded = serialization.encode_arguments(
            f"workflow {self.definition.name}", self.definition.fn, call_args, call_kwargs
        )
        return self.runtime.start_hooks.start_child(
            self.definition.name, encoded, new_run, publish, run_id, bool(detached)
        )

    def _new_run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
    ) -> Callable[[str], NewRun]:
        """Check and encode a start; returns the run's row given its id. ``options`` gets
        the resolved queue and loses countdown/eta and the canvas (kept in the row)."""
        runtime, definition = self.runtime, self.definition
        if definition.signature is not None:
            try:
                definition.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"workflow {definition.name}: {exc}") from None
        config = runtime.config
        encoded = serialization.encode_arguments(
            f"workflow {definition.name}",
            definition.fn,
            args,
            kwargs,
            config.max_payload_bytes,
            config.max_payload_depth,
        )
        validate.check_queue(
            options.get("queue") or definition.queue, f"workflow {definition.name}: queue"
        )
        queue = self._resolve_queue(args, kwargs, options)
        try:
            start_delay = start_delay_of(options.pop("countdown", None), options.pop("eta", None))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"workflow {definition.name}: {exc}") from None
        if queue:
            options["queue"] = queue
        timeout = options.pop("timeout", None)
        owner = f"workflow {definition.name}: timeout"
        timeout = definition.timeout if timeout is None else validate.parse_duration(timeout, owner)
        priority = options.get("priority") or 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidArgument(
                f"workflow {definition.name}: priority must be an integer, got {priority!r}"
            )
        # Fired when the run settles, not when a message ends (see canvas.reports).
        canvas = runtime.start_hooks.encode_canvas(self.app, options, f"workflow {definition.name}")
        return lambda run_id: NewRun(
            id=run_id,
            name=definition.name,
            args=encoded,
            queue=queue,
            max_attempts=definition.max_attempts or config.max_attempts,
            retry_backoff=(
                config.retry_backoff
                if definition.retry_backoff is None
                else definition.retry_backoff
            ),
            dispatch_grace=config.dispatch_grace,
            start_delay=start_delay,
            canvas=canvas,
            priority=priority,
            timeout=timeout,
        )

    def _resolve_queue(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
    ) -> str | None:
        """The queue Celery's routing sends this run to, stored with the run so that every
        later publish (sweeper, wake-up, recovery), from any app, goes to the same queue."""
        wanted = {**self._get_exec_options(), **options}
        wanted = {key: value for key, value in wanted.items() if value is not None}
        route = self.app.amqp.router.route(wanted, self.name, args, kwargs, self)
        queue = route.get("queue")
        name = getattr(queue, "name", queue)
        return str(name) if name else None

    def _publish_started(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str,
        options: dict[str, Any],
        caller: WorkflowHandle | None = None,
    ) -> None:
        """Publish a stored run. A failure is logged, or, for the ``caller`` of
        ``.delay()`` (eager mode aside: it runs the body here), raised as RunNotPublished,
        so that a retry doesn't start a second run."""
        apply = super().apply_async

        def failed(exc: Exception) -> None:
            # The run is stored: the sweeper publishes it after durable_dispatch_grace.
            self._disown(run_id)
            if caller is not None and not self.app.conf.task_always_eager:
                grace = self.runtime.config.dispatch_grace
                raise RunNotPublished(self.definition.name, run_id, grace, caller, exc) from exc

        headers = {**(options.pop("headers", None) or {}), STORED_HEADER: True}
        publish_or_leave(
            lambda: apply(args, kwargs, task_id=run_id, headers=headers, **options),
            logger,
            "workflow %s run %s",
            self.definition.name,
            run_id,
            fields=run_fields(run_id, self.definition.name, 0),
            failed=failed,
        )

    def _disown(self, run_id: str) -> None:
        """No broker has the run: any sweeper of the namespace may publish it, not only
        those of this app's broker (one that this process can't reach, or one spelled
        otherwise than the workers' URL). Only on this failure path: no hot-path cost."""
        try:
            self.runtime.store.disown_run(run_id)
        except Exception:  # noqa: BLE001 - it stays its broker's: swept once that is back
            logger.warning(
                "run %s stays its broker's to dispatch (handing it to any sweeper failed)",
                run_id,
                exc_info=True,
                extra=run_fields(run_id, self.definition.name, 0),
            )

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Celery's in-process execution, for a run that exists (eager mode goes through
        apply_async, which inserts it first)."""
        task_id = options.get("task_id")
        if task_id is None or self.runtime.store.get_status(task_id) is None:
            raise TypeError(
                f"workflow {self.definition.name}: start runs with .delay() or .apply_async() "
                "(set task_always_eager to run them in-process); .apply() alone has no run"
            )
        return super().apply(args, kwargs, **options)

    # -- run -----------------------------------------------------------------------------

    def run_workflow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = self.request
        if request.called_directly:
            # Run here, the body would run its steps for real outside any run: nothing
            # recorded, nothing retried, until a body-only call (set_state...) refuses.
            raise TypeError(
                f"workflow {self.definition.name} was called directly, which would run its "
                "body outside a run; start a run with .delay() or .apply_async() (with "
                "task_always_eager it runs in-process); .apply() runs only a run that exists"
            )
        # Celery's tracer must neither fire the message's canvas nor store a result when
        # this delivery ends: the run does both when it settles.
        starts = self.runtime.start_hooks
        carried = starts.take_canvas(self.app, request)
        by_name, start_by_name = None, starts.start_by_name
        if start_by_name is not None and not request_header(request, STORED_HEADER):
            by_name = lambda: start_by_name(self, request, args, kwargs, carried)  # noqa: E731
        with tracing.delivery(self.definition.name, request):
            try:
                return execute(
                    self.runtime, self.definition, request, self.time_limit, start_by_name=by_name
                )
            except ClaimUnavailable as unavailable:
                if request.is_eager:
                    raise unavailable.__cause__ or unavailable from None
                redeliver_later(self, args, kwargs, unavailable, carried)
