"""The Runtime: what the engine, the runs and the ops need of a Durable, and nothing more.

``Durable`` builds one per instance and binds it to the Celery app
(``celery_durable.engine.apps``); everything below ``durable.py`` takes a Runtime, so that
no module of the engine depends on the class that registers workflows. The parts it holds,
and the passes they run, sit below this module: they take its
``RuntimeView``, so none of them imports it back.

Example::

    runtime = durable.runtime
    runtime.store.get_run("order-42")                 # the database, opened on first use
    runtime.publish(run.id, run.name, run.args, run.queue)
"""

from __future__ import annotations

from typing import Any, Protocol

from celery import Celery, Task

from celery_durable.body.context import LimiterView
from celery_durable.body.step import Step
from celery_durable.core import logs, serialization, tracing
from celery_durable.core.config import DurableConfig
from celery_durable.engine import apps
from celery_durable.engine.deadlines import cancel_overdue
from celery_durable.engine.definition import WorkflowDefinition
from celery_durable.engine.hooks import DeliveryHooks
from celery_durable.engine.leases import LeaseKeeper
from celery_durable.engine.publish import STORED_HEADER, Dispatch, queue_option
from celery_durable.engine.queues import FleetWatch
from celery_durable.engine.runtime_view import RuntimeView, SweepPass
from celery_durable.engine.start_hooks import StartHooks
from celery_durable.engine.sweeper import Sweeper
from celery_durable.store import Store


def kernel_passes(runtime: RuntimeView, sweeper: Sweeper) -> dict[str, SweepPass]:
    """The sweep's passes of the kernel, by name; ``wiring.py`` sets the sweep's order,
    the wings' passes among them."""
    passes = [
        SweepPass("due runs", sweeper.dispatch_due_runs),
        SweepPass("signalled runs", sweeper.wake_signalled_runs),
        SweepPass("deadlines", lambda: cancel_overdue(runtime), publishes=False),
        SweepPass("revokes", sweeper.cancel_revoked, publishes=False),
        SweepPass("retention", sweeper.retain, publishes=False),
    ]
    return {each.name: each for each in passes}


class Runtime:
    """One Durable's parts: the app, the merged config, the store, the registries (the
    delivery hooks among them), the lease heartbeat, the sweeper and the dispatcher of
    items."""

    def __init__(self, app: Celery, settings: dict[str, Any]) -> None:
        self.app = app
        self.settings = settings
        self._config: DurableConfig | None = None
        self._store: Store | None = None
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.steps: dict[str, Step[Any, Any]] = {}
        self.limiters: dict[str, LimiterView] = {}  # declared by the limiters wing
        # Declared above the engine (runs.schedules.ScheduleSpec by name), fired by a pass
        # that layer adds to ``sweep_passes``.
        self.schedules: dict[str, Any] = {}
        self.scheduled_for_workflows: set[str] = set()  # workflows given ``scheduled_for``
        # How the features plug into each delivery (engine.hooks), filled by wiring.py.
        self.hooks = DeliveryHooks()
        self.start_hooks = StartHooks()  # and into each start (engine.start_hooks)
        self.leases = LeaseKeeper(self)
        self.sweeper = Sweeper(self)
        self.kernel_passes = kernel_passes(self, self.sweeper)
        self.sweep_passes: list[SweepPass] = list(self.kernel_passes.values())
        self.dispatch = Dispatch(self)
        self.fleet = FleetWatch(app)

    def __repr__(self) -> str:
        return f"<Runtime app={self.app.main!r} settings={sorted(self.settings)}>"

    @property
    def config(self) -> DurableConfig:
        if self._config is None:
            self._config = DurableConfig.from_sources(self.settings, self.app.conf)
            if self._config.log_json:
                logs.install_json()
        return self._config

    @property
    def store(self) -> Store:
        if self._store is None:
            config = self.config
            self._store = Store(
                config.database_url,
                config.table_prefix,
                config.namespace,
                pgbouncer=config.pgbouncer,
                listen_url=config.listen_url,
                dispatcher=self.dispatcher,
            )
        return self._store

    def reopen(self) -> None:
        """Forget the merged config and the store (their connections closed): the next use
        reads the settings again, e.g. once a test runner has moved the database."""
        if self._store is not None:
            self._store.dispose()
        self._store = None
        self._config = None

    @property
    def store_opened(self) -> bool:
        """Whether this process has used the store (nothing to release otherwise)."""
        return self._store is not None

    @property
    def dispatcher(self) -> str:
        """The broker this app publishes to (its URL without the password): recorded on
        the runs it starts and its workers claim, so that its sweepers dispatch only
        those, not the runs of an app on another broker sharing the namespace."""
        return apps.broker_identity(self.app)

    def publish(self, run_id: str, name: str, args: str, queue: str | None) -> None:
        """Publish a stored run's task message (the sweeper's re-dispatch, a wake-up)."""
        call_args, call_kwargs = serialization.loads(args)
        options = queue_option(self.app, queue)
        options["headers"] = {STORED_HEADER: True}
        tracing.add_link_headers(options)  # a wake-up's sender, linked by the resumed run
        task = self.app.tasks.get(name)
        if isinstance(getattr(task, "definition", None), WorkflowDefinition):
            # A WorkflowTask: Celery's own apply_async (the task's would start a new run),
            # routing from the task class, eager mode honoured.
            Task.apply_async(task, call_args, call_kwargs, task_id=run_id, **options)
        else:  # a workflow this process doesn't import: publish by name
            self.app.send_task(name, call_args, call_kwargs, task_id=run_id, **options)


class HasRuntime(Protocol):
    """What holds a Runtime: a ``Durable``, typed here without
    importing it (``durable.py`` sits above every module that takes one)."""

    @property
    def runtime(self) -> Runtime: ...


def bound_runtimes(app: Celery) -> list[Runtime]:
    """The Runtimes bound to ``app``, typed as what they are: ``apps`` sits below this
    module, so it keeps them as the view its parts use (Durable binds only Runtimes)."""
    return [runtime for runtime in apps.runtimes_of(app) if isinstance(runtime, Runtime)]


def runtime_of(owner: Runtime | HasRuntime) -> Runtime:
    """The Runtime of a public entry point's argument: a Durable or a Runtime."""
    return owner if isinstance(owner, Runtime) else owner.runtime
