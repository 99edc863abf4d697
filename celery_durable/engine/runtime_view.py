"""What the Runtime's parts use of the Runtime: ``RuntimeView``, a protocol.

The Runtime (``engine/runtime.py``) holds the lease keeper, the sweeper and the dispatch,
and through the sweeper every pass it runs (items, limits, deadlines, canvas reports,
retention, liveness). They all take the Runtime that holds them, so typing them with the
class itself would make each of them import the module that imports them. They take this
view instead: it sits below all of them, and names only types from below the engine
(``core``, ``store``, ``body``, Celery) or small protocols of its own, so the Runtime
depends on its parts and never the other way. A Runtime satisfies it structurally; mypy
checks that where the Runtime hands itself to a part (``LeaseKeeper(self)``, ...). A
settle tells the features through the view too (``SettleListener``, in ``hooks``).

Example::

    def cancel_overdue(runtime: RuntimeView, batch: int | None = None) -> int:
        for run_id in runtime.store.overdue_runs(batch): ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from celery import Celery

    from celery_durable.body.context import DispatchView, LimiterView, WorkflowContext
    from celery_durable.body.step import Step
    from celery_durable.core.config import DurableConfig
    from celery_durable.engine.definition import WorkflowDefinition
    from celery_durable.store import StepRecord, Store
    from celery_durable.store.areas import OpenItemLease


@dataclasses.dataclass(frozen=True)
class SweepPass:
    """One pass of every sweep: ``act`` finds what is due and acts on it. With
    ``publishes`` (the default) it returns how many runs or items it published, which the
    sweep adds up; otherwise what it returns is its own (a count of cancels, of deletes).
    Every pass, the kernel's and each feature's, is one of these in ``sweep_passes``."""

    name: str
    act: Callable[[], Any]
    publishes: bool = True


class SettleListener:
    """A feature's part in settling an attempt (the delivery hooks' ``settle_listeners``,
    which wiring.py registers), in the spirit of a middleware: each method does
    nothing unless the feature overrides it."""

    def waiting(self, runtime: RuntimeView, ctx: WorkflowContext, reason: str) -> None:
        """The run suspends, waiting for ``reason``."""

    def stopped(self, runtime: RuntimeView, ctx: WorkflowContext, stop: BaseException) -> None:
        """The body stopped with ``stop``: a stop of the feature's own kind (a continue as
        new) is settled here, and the delivery ends by what this raises."""

    def finishing(
        self,
        runtime: RuntimeView,
        ctx: WorkflowContext,
        status: str,
        error: str | None,
        step: StepRecord | None,
    ) -> Callable[[], str | None] | None:
        """The run fails for good or is cancelled: how the feature ends it instead of the
        plain finish (a saga rolls back first), returning its final status; None: not
        this run's."""
        return None

    def cancelled(self, runtime: RuntimeView, run_id: str) -> None:
        """A cancel outside any delivery finished the run (``engine.cancel``)."""

    def settled(
        self,
        runtime: RuntimeView,
        ctx: WorkflowContext,
        status: str,
        result: str | None,
        error: str | None,
    ) -> None:
        """The run has its final ``status`` (with its result, or its error)."""


class SettleHooks(Protocol):
    """The delivery hooks a settle calls (``engine.hooks.DeliveryHooks`` has them)."""

    @property
    def settle_listeners(self) -> Sequence[SettleListener]: ...


class LeaseTracking(Protocol):
    """The lease heartbeat as item tasks and reports use it (``leases.LeaseKeeper``; the
    keeper is a part of its own, so the view can't name its class)."""

    def item_token(self) -> str:
        """A claim token for an item, unique across processes and claims."""
        ...

    def track_item(self, held: tuple[str, int, int, str]) -> None: ...

    def untrack_item(self, held: tuple[str, int, int, str]) -> None: ...

    def track_open_item(self, opened: OpenItemLease) -> None: ...

    def untrack_open_item(self, opened: OpenItemLease) -> None: ...

    def reported(self, run_id: str) -> None:
        """The run's report to Celery is made: its outbox entry is cleared at a beat."""
        ...


class Fleet(Protocol):
    """How many pool processes the running workers have (``queues.FleetWatch``)."""

    def concurrency(self, ttl: float) -> int: ...


class RuntimeView(Protocol):
    """The Runtime as its parts see it; read-only, as none of them replaces what it holds."""

    @property
    def app(self) -> Celery: ...

    @property
    def config(self) -> DurableConfig:
        """The merged settings (read on first use)."""
        ...

    @property
    def store(self) -> Store:
        """The database (opened on first use)."""
        ...

    @property
    def workflows(self) -> Mapping[str, WorkflowDefinition]: ...

    @property
    def steps(self) -> Mapping[str, Step[Any, Any]]: ...

    @property
    def scheduled_for_workflows(self) -> Collection[str]:
        """The workflows whose runs get their schedule's slot as ``scheduled_for``."""
        ...

    @property
    def limiters(self) -> Mapping[str, LimiterView]: ...

    @property
    def sweep_passes(self) -> Sequence[SweepPass]:
        """Every pass of a sweep, in the order the sweeper runs them each poll."""
        ...

    @property
    def leases(self) -> LeaseTracking: ...

    @property
    def hooks(self) -> SettleHooks:
        """The features' listeners to a run's settle (registered by wiring.py)."""
        ...

    @property
    def dispatch(self) -> DispatchView: ...

    @property
    def fleet(self) -> Fleet: ...

    def publish(self, run_id: str, name: str, args: str, queue: str | None) -> None:
        """Publish a stored run's task message (the sweeper's re-dispatch, a wake-up)."""
        ...
