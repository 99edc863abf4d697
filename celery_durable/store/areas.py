"""Store areas: a wing's operations on the database, held by a ``Store`` as ``store.<area>``.

The kernel's store imports no wing. A wing declares its area with an ``AreaKey`` (a name and
a factory that builds the area for one store: its statements, from the store's tables,
dialect and namespace, and the kernel's statements it merges with); ``wiring`` registers
the keys in ``STORE_AREAS``, and every ``Store`` built afterwards in the process holds one
instance of each. Wing code reaches its area typed with ``KEY.of(store)``; tests and users
may write ``store.<name>``. The kernel's own needs of an area are kernel protocols read
through a kernel key of the same name (``STATE_READS``, ``REPORTS_CLEARED``,
``FENCED_WRITES``, ``CANCEL_PARTICIPANT``, ``CHILD_SETTLES``, ``ITEM_LEASES``,
``ITEM_READS``), so it names no wing either.

Writes the kernel makes in its own transaction for a wing (cancelling a run drops its
pending signals) are the area's ``on_cancelled`` statements: the kernel runs them in its
transaction, in the area's registration order, so commits per operation are unchanged.
The fanout area's part of a cancel comes at several points of that transaction (the
parent's row locked before the run's): a protocol of its own, ``CancelParticipant``.

Example::

    WAITS = AreaKey("waits", WaitsArea)      # the wing
    STORE_AREAS.add(WAITS)                   # wiring
    WAITS.of(store).insert_signal(...)       # wing code, typed
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

from sqlalchemy import Connection

from celery_durable.store.records import DueRun, ItemRow, StepRecord

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

    def find(self, store: Store) -> AreaT | None:
        """``store``'s area, or None when its wing is not wired."""
        return cast(AreaT | None, store.areas.get(self.name))


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


class LockedParent(NamedTuple):
    """A run's parent, its row locked in the caller's transaction (read by its wing)."""

    run_id: str
    idx: int | None
    row: Any


class CancelParticipant(Protocol):
    """What the kernel's ``cancel_run`` asks of the fanout area, each part in its one
    transaction at its point: the parent's row locked before the run's (the order every
    writer keeps), the run's pending items cancelled with it, the parent's item settled
    when the run is CANCELLED at once (the parent woken: returned), and the children to
    cancel afterwards, each in a transaction of its own."""

    def lock_parent(self, conn: Connection, values: dict[str, Any]) -> LockedParent | None: ...

    def cancel_items(self, conn: Connection, values: dict[str, Any]) -> None: ...

    def settle_parent_item(
        self, conn: Connection, parent: LockedParent, run_id: str, grace: float
    ) -> DueRun | None: ...

    def children_to_cancel(self, conn: Connection, values: dict[str, Any]) -> list[str]: ...


CANCEL_PARTICIPANT: AreaKey[CancelParticipant] = AreaKey("fanout", _built_by_the_wing)


class ChildSettles(Protocol):
    """What the engine asks of the fanout area when a child run finishes: its settle and
    its parent's item in one transaction (the parent's row locked first), or the item
    alone (a sweep, a cancel found at a retry); each returns the woken parent."""

    def settle_child_run(
        self,
        run_id: str,
        fence: int,
        status: str,
        *,
        parent_id: str,
        parent_idx: int,
        grace: float,
        result: str | None = None,
        error: str | None = None,
        step: StepRecord | None = None,
        carried: Sequence[StepRecord] = (),
    ) -> tuple[str | None, DueRun | None]: ...

    def settle_child_item(
        self, parent_id: str, parent_idx: int, child_id: str, grace: float
    ) -> DueRun | None: ...


CHILD_SETTLES: AreaKey[ChildSettles] = AreaKey("fanout", _built_by_the_wing)


class OpenItemLease(Protocol):
    """An item run in its open transaction, as the lease keeper holds it: traded for a
    claim (``owner``, a lease) when it runs past a beat."""

    @property
    def key(self) -> tuple[str, int, int]: ...

    @property
    def owner(self) -> str | None: ...

    def convert(self, owner: str, lease: float) -> bool: ...


class ItemLeases(Protocol):
    """What the lease keeper asks of the fanout area: renew the leases of the items this
    process runs, (run id, step index, item, claim token) each, and give them back."""

    def renew_item_leases(self, held: Sequence[tuple[str, int, int, str]], lease: float) -> int: ...

    def release_items(self, held: Sequence[tuple[str, int, int, str]]) -> int: ...


ITEM_LEASES: AreaKey[ItemLeases] = AreaKey("fanout", _built_by_the_wing)


class ItemReads(Protocol):
    """What the operator API reads of the fanout area: a run's items, by step."""

    def list_items(self, run_id: str) -> list[ItemRow]: ...


ITEM_READS: AreaKey[ItemReads] = AreaKey("fanout", _built_by_the_wing)
