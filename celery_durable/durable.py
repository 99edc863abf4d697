"""Durable: binds celery_durable to a Celery app; holds the config and the registries.

Example::

    app = Celery("shop", broker="redis://127.0.0.1:6379/0")
    durable = Durable(app, database_url="postgresql+psycopg://postgres@127.0.0.1/shop")

    @durable.step
    def reserve(order_id: int) -> dict: ...

    @durable.workflow
    def checkout(order_id: int) -> dict:
        return reserve(order_id)
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from celery import Celery
from celery import signals as celery_signals

from celery_durable.body.context import LimiterView
from celery_durable.body.step import DEFAULT_MAX_BACKOFF, Step, StepOptions
from celery_durable.core import validate
from celery_durable.core.config import DurableConfig
from celery_durable.core.off_loop import off_loop
from celery_durable.engine import apps
from celery_durable.engine.definition import WorkflowDefinition
from celery_durable.engine.runtime import Runtime
from celery_durable.errors import (
    ConfigurationError,
    DuplicateRegistration,
    InvalidArgument,
)
from celery_durable.fanout.item_tasks import register_item_task
from celery_durable.limiters.limiter import Limiter, declare, named, workflow_limiter
from celery_durable.limiters.operations import LimiterOperations
from celery_durable.runs.task import WorkflowTask
from celery_durable.schedules.declared import from_beat as beat_entries
from celery_durable.schedules.firing import declare as declare_schedule
from celery_durable.schedules.operations import ScheduleOperations
from celery_durable.waits.signals import (
    send_signal_via_broker,
)
from celery_durable.wiring import wire

if TYPE_CHECKING:
    from celery_durable.store.migrations import Migrated

logger = logging.getLogger("celery_durable")

F = TypeVar("F", bound=Callable[..., Any])

# The Durable instances of each Celery app, for the CLI (the engine looks up their runtimes).
_BOUND: weakref.WeakKeyDictionary[Celery, list[Durable]] = weakref.WeakKeyDictionary()


def durables_of(app: Celery) -> list[Durable]:
    """The Durable instances bound to ``app``, in the order they were created."""
    return list(_BOUND.get(app, []))


class Durable(ScheduleOperations, LimiterOperations):
    """celery_durable for one Celery app and one namespace.

    Settings come from keyword arguments (``database_url=...``, ``lock_timeout=...``; see
    the Settings reference), ``CELERY_DURABLE_*`` env vars and ``app.conf.durable_*``.
    They are read on first use, so ``app.conf`` may be filled after this call.

    It is also the operator API (``list_runs``, ``stats``, ``resume_runs``, ``gc``...:
    ``Operations``, with the wings' ``ScheduleOperations`` and ``LimiterOperations``),
    the one the CLI, the dashboard and the Django admin call.
    ``durable.runtime`` is internal: the machinery (store, sweeper, leases, dispatch) for
    celery_durable's own tests and integrations, with no stability promise.
    """

    def __init__(self, app: Celery, **settings: Any) -> None:
        self.app = app
        self._settings = settings
        # Unknown names and wrong types fail here, at import; ranges that depend on the
        # other sources (env, app.conf) are checked once they are merged, on first use.
        DurableConfig.check_keywords(settings)
        super().__init__(Runtime(app, settings))
        wire(self.runtime, app)
        celery_signals.worker_process_shutdown.connect(self._on_process_exit, weak=False)
        apps.bind(app, self.runtime)
        apps.hide_secret_settings()
        _BOUND.setdefault(app, []).append(self)

    def __repr__(self) -> str:
        return f"<Durable app={self.app.main!r} settings={sorted(self._settings)}>"

    # -- what a user reads ---------------------------------------------------------------------

    @property
    def config(self) -> DurableConfig:
        """The merged settings (keywords, env vars, app.conf), read on first use."""
        return self.runtime.config

    @property
    def workflows(self) -> dict[str, WorkflowDefinition]:
        """The workflows registered on this Durable, by task name."""
        return self.runtime.workflows

    @property
    def steps(self) -> dict[str, Step[Any, Any]]:
        """The steps registered on this Durable, by name."""
        return self.runtime.steps

    # -- registration ------------------------------------------------------------------------

    @overload
    def workflow(self, fn: F) -> Any: ...

    @overload
    def workflow(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        retry_backoff: float | None = None,
        limiter: Limiter | str | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None,
        timeout: Any = None,
        **task_options: Any,
    ) -> Callable[[F], Any]: ...

    def workflow(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        retry_backoff: float | None = None,
        limiter: Limiter | str | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None,
        timeout: Any = None,
        **task_options: Any,
    ) -> Any:
        """Register ``fn`` as a workflow: a Celery task named as Celery names tasks.

        ``limiter``: each run takes a slot of it before its body runs, and waits PENDING
        (no message, no worker) while none is free; ``concurrency`` (and
        ``concurrency_key``, a function of the arguments) is the shorthand for a limiter of
        the workflow's own. ``timeout`` (seconds, "2h", a timedelta): each run's deadline,
        at which it is cancelled ("deadline exceeded"; its compensations run)."""
        if fn is None:
            return lambda f: self.workflow(
                f,
                name=name,
                queue=queue,
                max_attempts=max_attempts,
                retry_backoff=retry_backoff,
                limiter=limiter,
                concurrency=concurrency,
                concurrency_key=concurrency_key,
                timeout=timeout,
                **task_options,
            )
        if max_attempts is not None and max_attempts < 1:
            raise ConfigurationError(f"workflow {fn.__qualname__}: max_attempts must be >= 1")
        if retry_backoff is not None and retry_backoff < 0:
            raise ConfigurationError(f"workflow {fn.__qualname__}: retry_backoff must be >= 0")
        task_name = name or self.app.gen_task_name(fn.__name__, fn.__module__)
        _refuse_coroutine(fn, f"workflow {task_name}")
        self._check_unique_workflow(task_name, fn)
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        definition = WorkflowDefinition(
            fn,
            task_name,
            queue,
            max_attempts,
            retry_backoff,
            signature,
            workflow_limiter(
                self.runtime.limiters, task_name, limiter, concurrency, concurrency_key
            ),
            None if timeout is None else validate.parse_duration(timeout, f"{task_name}: timeout"),
        )
        self.workflows[task_name] = definition

        def run(task: WorkflowTask, *args: Any, **kwargs: Any) -> Any:
            return task.run_workflow(args, kwargs)

        run.__name__ = fn.__name__
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        run.__doc__ = fn.__doc__
        options: dict[str, Any] = {"queue": queue} if queue else {}
        options.update(task_options)
        return self.app.task(
            name=task_name,
            base=WorkflowTask,
            bind=True,
            shared=False,
            runtime=self.runtime,
            definition=definition,
            **options,
        )(run)

    def _check_unique_workflow(self, task_name: str, fn: Callable[..., Any]) -> None:
        if task_name in self.workflows:
            earlier = self.workflows[task_name].fn
            raise DuplicateRegistration(
                f"workflow name {task_name!r} is already registered (by "
                f"{earlier.__module__}.{earlier.__qualname__}); pass name= to tell them apart"
            )
        for other in apps.runtimes_of(self.app):
            if other is not self.runtime and task_name in other.workflows:
                raise DuplicateRegistration(
                    f"workflow name {task_name!r} is already registered on this app"
                )
        existing = self.app._tasks.get(task_name)  # noqa: SLF001 - .tasks would finalize the app
        if existing is not None and not isinstance(existing, WorkflowTask):
            raise DuplicateRegistration(
                f"a Celery task named {task_name!r} already exists; a workflow can't reuse its name"
            )

    @overload
    def step(self, fn: F) -> Step[Any, Any]: ...

    @overload
    def step(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        max_attempts: int = 1,
        backoff: float = 0.0,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        dont_retry_on: tuple[type[BaseException], ...] = (),
        queue: str | None = None,
        compensate: Callable[..., Any] | None = None,
        commit: str = "each",
        limiter: LimiterView | str | None = None,
        terminate_on_timeout: bool = False,
    ) -> Callable[[F], Step[Any, Any]]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> Any:
        """Register ``fn`` as a step: inside a workflow its result is recorded and replayed.

        The step is also a Celery task of its own name, which runs it when started with
        ``step.start()`` or ``cd.map()``. With ``queue`` it is a routed step: called in a
        workflow body it always runs as that task, on that queue. ``commit="deferred"``:
        its record rides on the run's next write instead of a commit of its own (a crash
        before that write runs it again). ``compensate``: what undoes it when the run fails
        for good or is cancelled (``compensate(*args, result=<its output>, **kwargs)``; a
        step runs under its own ``max_attempts``).
        """
        # An unknown keyword is a TypeError here, before there is a function to decorate.
        if "limiter" in options:
            options["limiter"] = named(self.runtime.limiters, options["limiter"], f"step {name}")
        chosen = StepOptions(**options)
        if fn is None:
            return lambda f: self._register_step(f, name, chosen)
        return self._register_step(fn, name, chosen)

    def _register_step(
        self, fn: Callable[..., Any], name: str | None, options: StepOptions
    ) -> Step[Any, Any]:
        # Named as Celery names tasks, as workflows are: a script's are <app>.fn, not __main__.fn.
        step_name = name or self.app.gen_task_name(fn.__qualname__, fn.__module__)
        if step_name in self.steps:
            raise DuplicateRegistration(
                f"step name {step_name!r} is already registered; pass name= to tell them apart"
            )
        _refuse_coroutine(fn, f"step {step_name}")
        step = Step(fn, name=step_name, options=options)
        register_item_task(self.app, step)
        self.steps[step_name] = step
        return step

    def limiter(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: str | None = None,
        key: Callable[..., Any] | None = None,
    ) -> Limiter:
        """A fleet-wide limiter: ``concurrency`` slots and, with ``rate`` ("N/s", "N/m",
        "N/h"), a token bucket, kept in the database and shared by every worker; with
        ``key`` (a function of the arguments) each key has its own. Guards a step
        (``@durable.step(limiter=...)``) or a workflow (``@durable.workflow(limiter=...)``)."""
        return declare(self.runtime.limiters, name, concurrency, rate, key)

    def schedule(self, workflow: Any = None, /, **options: Any) -> Any:
        """Start ``workflow`` once per slot of ``cron=`` (5 fields, or 6 with seconds
        first) or ``every=`` (a timedelta, seconds or "15m"), in ``tz`` (IANA, default
        UTC), with ``args``/``kwargs``/``options``; ``overlap`` ("skip", "buffer_one",
        "allow", "cancel_previous"), ``catchup`` ("latest", "all", "none") and
        ``catchup_window``; ``name`` (default: the workflow's). Without ``workflow``, a
        decorator over ``@durable.workflow``. The run's id is
        ``schedule:<name>:<slot in UTC>``; a workflow with a ``scheduled_for`` parameter
        gets the slot there, an aware datetime in ``tz``."""
        if workflow is None:
            return lambda task: (declare_schedule(self.runtime, task, **options), task)[1]
        return declare_schedule(self.runtime, workflow, **options)

    def schedules_from_beat(self, beat_schedule: dict[str, Any]) -> list[str]:
        """Declare the ``beat_schedule`` entries that name workflows as schedules; returns
        their names. InvalidArgument naming every entry it can't express, before any is
        declared."""
        declared, refused = beat_entries(
            beat_schedule, self.runtime.workflows, self.app.conf.timezone
        )
        if refused:
            raise InvalidArgument("; ".join(refused))
        return [declare_schedule(self.runtime, **each).name for each in declared]

    # -- runs ---------------------------------------------------------------------------------

    def send_signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        idempotency_key: str | None = None,
        *,
        store_first: bool | None = None,
    ) -> str:
        """Signal a run from a producer that may have only the broker; returns the message id.

        When this process has a database configured (``store_first`` defaults to that),
        the signal is stored here first and the broker carries only its wake-up, so a
        worker crash can't hold it back; if the store is unreachable it travels through
        the broker for a worker to store. Raises WorkflowNotFound when the store says the
        run doesn't exist; nothing is raised for a finished or full run (nor for a missing
        one when the signal goes through the broker: no database, ``store_first=False``
        or the store unreachable): the signal is logged and kept with the reason.
        See ``WorkflowHandle.signal`` for the path that raises for those too.
        """
        if store_first is None:
            store_first = self.database_configured
        return send_signal_via_broker(
            self.runtime, run_id, name, payload, idempotency_key, store_first=store_first
        )

    async def asend_signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        idempotency_key: str | None = None,
        *,
        store_first: bool | None = None,
    ) -> str:
        """``send_signal``, awaited without blocking the event loop: it runs on a client
        thread (the store's write, then the broker's publish); the same result and errors."""
        return await off_loop(
            self.send_signal, run_id, name, payload, idempotency_key, store_first=store_first
        )

    @property
    def database_configured(self) -> bool:
        """Whether a database URL was given (keyword, env var, app.conf, or a framework's
        database settings such as Django's DATABASES), rather than the embedded default: a
        broker-only producer must not store signals in a local file."""
        return "database_url" in self.config.given

    def dashboard_app(self, *, asgi: bool = False, **options: Any) -> Any:
        """The dashboard as a WSGI app (ASGI with ``asgi=True``), to mount in a web app;
        needs the ``dashboard`` extra. ``options``: ``basic_auth``, ``read_only``,
        ``url_prefix``, ``secret_key``, ``allowed_hosts``, ``trusted_proxies``,
        ``refresh_seconds`` (see the dashboard's page of the docs).

        Example: ``DispatcherMiddleware(site, {"/durable": durable.dashboard_app()})``
        """
        from celery_durable.ops.dashboard import dashboard_app

        return dashboard_app(self, asgi=asgi, **options)

    # -- schema -------------------------------------------------------------------------------

    def migrate(self, revision: str = "head", sql: bool = False) -> str | Migrated:
        """Bring the tables up to ``revision`` and return what was done (``str()`` of it
        says: created, upgraded from A to B, or already there); with ``sql=True`` return
        the DDL instead."""
        from celery_durable.store.migrations import upgrade

        return upgrade(self.runtime.store, revision=revision, sql=sql)

    # -- lifecycle ----------------------------------------------------------------------------

    def _on_process_exit(self, **_: Any) -> None:
        if self.runtime.store_opened:
            self.runtime.leases.release_all()


def _refuse_coroutine(fn: Callable[..., Any], what: str) -> None:
    if inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"{what}: an async generator can't be a workflow or a step (its value is "
            "recorded once); return a list, or write an async def"
        )
