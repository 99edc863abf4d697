"""Schedules in tests: a sweep at a moment the test picks (an injected clock, so a gap of
hours costs nothing), and the runs and slots a schedule has."""

from __future__ import annotations

from typing import Any

from celery_durable.schedules import firing
from celery_durable.schedules.declared import sync


def fire_at(durable: Any, moment: float) -> int:
    """One schedule pass as of ``moment`` (epoch seconds); the code's schedules are
    upserted first, as a worker does when it starts. Returns the runs started."""
    runtime = durable.runtime
    sync(runtime)
    return firing.fire_due(runtime, now=moment)


def next_slot(durable: Any, name: str) -> float:
    """The slot the schedule waits to fire (after upserting the code's schedules)."""
    sync(durable.runtime)
    [row] = [row for row in durable.runtime.store.schedules.list_schedules() if row.name == name]
    assert row.next_slot is not None
    return float(row.next_slot)


def slot_outcomes(store: Any, name: str) -> dict[str, int]:
    """How many of the schedule's slots came to each outcome."""
    counts: dict[str, int] = {}
    for slot in store.schedules.firings(name, limit=100_000):
        counts[slot.outcome] = counts.get(slot.outcome, 0) + 1
    return counts


def runs_of(store: Any, name: str) -> list[Any]:
    """The schedule's slots that started a run, oldest first."""
    slots = store.schedules.firings(name, limit=100_000)
    return sorted((s for s in slots if s.run_id), key=lambda s: s.slot)
