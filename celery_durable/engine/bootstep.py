"""The worker bootstep that runs the sweepers (``Durable`` adds it to every ``celery worker``,
``celery.contrib.testing`` workers too), the warning it gives at start when another
broker's runs share this worker's namespace, and its refusal of a green pool (gevent,
eventlet) for an app with async workflows.

Example::

    app.steps["worker"].add(DurableSweeper)   # done by Durable(app)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery import bootsteps
from celery.concurrency import ALIASES
from celery.signals import task_unknown

from celery_durable.engine.announce import on_unknown_task, take_unclaimed_runs
from celery_durable.engine.runtime import bound_runtimes
from celery_durable.errors import ConfigurationError
from celery_durable.store.db.outage import describe, is_unreachable, summary
from celery_durable.store.db.unusable import app_argument, unusable

if TYPE_CHECKING:
    from celery_durable.engine.runtime import Runtime
    from celery_durable.engine.sweeper import Sweeper

logger = logging.getLogger("celery_durable.worker")

# A broker is live on a namespace while runs of it are active, or finished runs of it
# started within this many seconds.
OTHER_BROKER_WINDOW = 3600.0


def warn_other_brokers(runtime: Runtime) -> list[str]:
    """Warn, naming both, when runs of another broker are live on this worker's namespace
    (another app shares the database and namespace): this worker's sweeper won't dispatch
    them. Returns the other brokers; a failed look is logged and skipped."""
    namespace = runtime.config.namespace
    try:
        others = runtime.store.other_dispatchers(OTHER_BROKER_WINDOW)
    except Exception as exc:
        if unusable(exc, runtime.store.table_prefix) is not None:
            return []  # no tables yet: the sweeper's first failure says what to run
        logger.warning(
            "celery_durable: looking for other brokers on namespace %r failed",
            namespace,
            exc_info=True,
        )
        return []
    if others:
        logger.warning(
            "celery_durable: runs of namespace %r are also dispatched through another broker "
            "(%s; runs of it are active or started within the last hour) than this worker's "
            "(%s). Each broker's sweepers dispatch only their own runs; a run no sweeper of "
            "its broker took for %.0fs past due is taken by any. Give each broker's app a "
            "namespace of its own (durable_namespace), unless this deployment is moving "
            "from one broker to the other",
            namespace,
            ", ".join(others),
            runtime.store.dispatcher,
            runtime.sweeper.takeover,
        )
    return others


def refuse_green_pool(pool_cls: Any, runtimes: list[Runtime]) -> None:
    """Raise ConfigurationError, naming the pool and the workflows, when a green pool
    (gevent, eventlet) would run async workflows: their bodies run on an asyncio loop of
    the thread that takes the delivery, and a pool's greenlets share one thread, so two
    bodies at once would find each other's loop running. Plain workflows run there as
    before."""
    if not getattr(pool_cls, "is_green", False):
        return
    names = sorted(
        name for runtime in runtimes for name, d in runtime.workflows.items() if d.is_async
    )
    if not names:
        return
    path = f"{pool_cls.__module__}:{pool_cls.__qualname__}"
    pool = next((alias for alias, target in ALIASES.items() if target == path), path)
    raise ConfigurationError(
        f"celery_durable: the {pool} pool (-P {pool}) can't run async workflows, and this "
        f"app has {len(names)}: {', '.join(names)}. An async workflow's body runs on an "
        "asyncio event loop of the thread that takes its delivery, and green threads share "
        "one thread. Run this app's workers with -P prefork, -P threads or -P solo; to keep "
        f"{pool} for other tasks, give it a worker of an app without async workflows, on "
        "queues of its own"
    )


class DurableSweeper(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: runs the sweeper of every Durable bound to the worker's app.

    It runs in every ``celery worker`` (and ``celery.contrib.testing`` worker); nothing
    else to deploy. Each Durable sweeps its own namespace.
    """

    label = "celery_durable sweeper"
    # After the pool: children fork before the sweeper thread exists.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        # Here, as the worker applies its steps: before its pool starts or a message is
        # taken (the pool class is resolved by then).
        refuse_green_pool(worker.pool_cls, bound_runtimes(worker.app))
        self.sweepers: list[Sweeper] = []

    def start(self, worker: Any) -> None:
        app_argument()  # remembered here, in click's context, for the sweeper's thread
        task_unknown.connect(on_unknown_task, weak=False, dispatch_uid="celery_durable")
        for runtime in bound_runtimes(worker.app):
            # Import the driver and open the engine in the main thread: a child forked
            # while another thread holds an import lock would hang on that import.
            try:
                runtime.store.now()
            except Exception as exc:
                # One clear line (no traceback): the sweeper's backoff logs what follows.
                runtime.sweeper.failures.count = 1
                logger.error(
                    "celery_durable: the database %s is %s: %s; workflows of namespace %r "
                    "can't start or run until it is back (the sweeper retries with backoff)",
                    describe(runtime.store.url),
                    "unreachable" if is_unreachable(exc) else "not usable",
                    summary(exc),
                    runtime.config.namespace,
                )
            else:
                warn_other_brokers(runtime)
                take_unclaimed_runs(runtime)
            runtime.sweeper.start()
            self.sweepers.append(runtime.sweeper)
            logger.info(
                "celery_durable sweeper started (namespace %r, every %.2fs)",
                runtime.config.namespace,
                runtime.config.poll_interval,
            )

    def stop(self, worker: Any) -> None:
        for sweeper in self.sweepers:
            sweeper.stop()
        self.sweepers = []

    shutdown = stop
