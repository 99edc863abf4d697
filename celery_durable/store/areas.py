"""Store areas: a wing's operations on the database, held by a ``Store`` as ``store.<area>``.

The kernel's store imports no wing. A wing declares its area with an ``AreaKey`` (a name and
a factory that builds the area for one store: its statements, from the store's tables,
dialect and namespace, and the kernel's statements it merges with); ``wiring`` registers
the keys in ``STORE_AREAS``, and every ``Store`` built afterwards in the process holds one
instance of each. Wing code reaches its area typed with ``KEY.of(store)``; tests and users
may write ``store.<name>``. The kernel's own needs of an area are kernel protocols read
through a kernel key of the same name (``STATE_READS``, ``REPORTS_CLEARED``,
``FENCED_WRITES``), so it names no wing either.

Writes the kernel makes in its own transaction for a wing (cancelling a run drops its
pending signals) are the area's ``on_cancelled`` statements: the kernel runs them in its
transaction, in the area's registration order, so commits per operation are unchanged.

Example::

    WAITS = AreaKey("waits", WaitsArea)      # the wing
    STORE_AREAS.add(WAITS)                   # wiring
    WAITS.of(store).insert_signal(...)       # wing code, typed
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from celery_durable.store.records import StepRecord

AreaT = TypeVar("AreaT", covariant=True)


class StoreArea(Protocol):
    """What the kernel asks of every area: the statements it runs when a run is cancelled
    (run in ``cancel_run``'s transaction when the run became CANCELLED at once)."""

    @property
    def on_cancelled(self) -> Sequence[Any]: ...


class Store(Protocol):
    """A store as an area key sees it (the kernel's ``Store``, which this module is below)."""

    @property
    def areas(self) -> dict[str, StoreArea]: ...


class AreaKey(Generic[AreaT]):
    """The name a store holds an area under, and how one is built for a store."""

    def __init__(self, name: str, build: Callable[[Any], AreaT]) -> None:
        self.name = name
        self.build = build

    def of(self, store: Store) -> AreaT:
        """``store``'s area; an error saying what is missing when its wing is not wired."""
        try:
            area = store.areas[self.name]
        except KeyError:
            raise LookupError(
                f"this store has no {self.name!r} area: its wing is not wired "
                "(import celery_durable before building a Store)"
            ) from None
        return cast(AreaT, area)  # the key that built it is of this type


class AreaRegistry:
    """The areas every store of the process is built with, in registration order."""

    def __init__(self) -> None:
        self.keys: list[AreaKey[StoreArea]] = []

    def add(self, key: AreaKey[StoreArea]) -> None:
        if any(known.name == key.name for known in self.keys):
            raise ValueError(f"a store area named {key.name!r} is registered already")
        self.keys.append(key)

    def build(self, store: Any) -> dict[str, StoreArea]:
        """``store``'s areas (the kernel's ``Store``, being built: each factory takes it)."""
        return {key.name: key.build(store) for key in self.keys}


STORE_AREAS = AreaRegistry()


class StateReads(Protocol):
    """What the kernel reads of the waits area: the dashboard shows a run's published
    values, retention deletes orphaned signals."""

    def get_state(self, run_id: str, key: str) -> str | None: ...

    def count_orphan_signals(self, cutoff: float) -> int: ...

    def gc_orphan_signals(self, cutoff: float, batch: int) -> int: ...


def _built_by_the_wing(store: Any) -> Any:
    raise AssertionError("a kernel key only reads an area; its wing's key builds it")


STATE_READS: AreaKey[StateReads] = AreaKey("waits", _built_by_the_wing)


class LimiterFigures(Protocol):
    """A limiter key's usage as the metrics endpoint reads it (the wing's
    ``LimiterUsage``)."""

    @property
    def limiter(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def in_use(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    @property
    def oldest_wait(self) -> float | None: ...


class LimiterUsageReads(Protocol):
    """What the kernel reads of the limiters area: each limiter key's usage, for the
    metrics endpoint, under ``limits`` (``LimiterView.limit`` of the declared limiters,
    by name)."""

    def limiter_usage(self, limits: dict[str, Any]) -> Sequence[LimiterFigures]: ...


LIMITER_USAGE: AreaKey[LimiterUsageReads] = AreaKey("limiters", _built_by_the_wing)


class ReportsCleared(Protocol):
    """What the kernel asks of the canvas area: the lease keeper clears the outbox entries
    of the runs whose report to Celery was made, a beat's batch in one statement."""

    def clear_reported(self, run_ids: Sequence[str]) -> None: ...


REPORTS_CLEARED: AreaKey[ReportsCleared] = AreaKey("canvas", _built_by_the_wing)


class FencedWrites(Protocol):
    """What the kernel (and the fanout wing) asks of the sagas area: a step written while
    the worker holds the run, cancel requested or not; how deep a run is nested."""

    def record_fenced_step(self, run_id: str, fence: int, step: StepRecord) -> bool: ...

    def count_ancestors(self, run_id: str, limit: int) -> int: ...


FENCED_WRITES: AreaKey[FencedWrites] = AreaKey("sagas", _built_by_the_wing)
