"""Reads only the dashboard needs: recent run durations (p50/p95), an id prefix search, a
run's consumed signals and the current (last recorded) step of each run on a page.

Each goes through the settled-run indexes or the primary key and stops at a limit, so it
costs the same with a million finished runs as with a hundred. The statements are in
``sql/reads.py``.

Example::

    durations = recent_durations(store, seconds=3600)   # {"shop.checkout": [0.4, 1.2, ...]}
    runs = runs_by_id_prefix(store, "order-4", limit=50)
    taken = consumed_signals(store, "order-42")          # [ConsumedSignal(...), ...]
    current = current_steps(store, ["order-42", "order-43"])  # {"order-42": CurrentStep}
    page = steps_page(store, "order-42", first=100, limit=100)  # steps 100 to 199
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery_durable.store.operation_records import RunSummary
from celery_durable.store.records import StepRecord
from celery_durable.store.sql.reads import ConsumedSignal, CurrentStep

if TYPE_CHECKING:
    from celery_durable.store.store import Store

# The records the reads fill, for the dashboard.
__all__ = [
    "ConsumedSignal",
    "CurrentStep",
    "consumed_signals",
    "count_steps",
    "current_steps",
    "recent_durations",
    "runs_by_id_prefix",
    "step_at",
    "steps_page",
]


def recent_durations(store: Store, seconds: float = 3600.0) -> dict[str, list[float]]:
    """Durations (seconds) of the finished (succeeded or failed) runs created in the last
    ``seconds``, by workflow, sorted; at most ``DURATION_SAMPLE`` per status."""
    found: dict[str, list[float]] = {}
    with store._operations_read() as conn:
        for statement in store.sql.reads.recent_durations:
            for name, took in conn.execute(statement, {"p_seconds": seconds}):
                found.setdefault(name, []).append(max(0.0, float(took)))
    for values in found.values():
        values.sort()
    return found


def runs_by_id_prefix(store: Store, prefix: str, limit: int = 50) -> list[RunSummary]:
    """Up to ``limit`` runs whose id starts with ``prefix``, by id."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    values = {
        "p_prefix": prefix,
        "p_prefix_end": prefix + "\U0010ffff",
        "p_pattern": escaped + "%",
        "p_limit": limit,
    }
    with store._operations_read() as conn:
        rows = conn.execute(store.sql.reads.runs_by_id_prefix, values).all()
    return [RunSummary(*row) for row in rows]


def consumed_signals(store: Store, run_id: str) -> list[ConsumedSignal]:
    """The signals the run consumed, oldest first (at most ``CONSUMED_LIMIT``)."""
    with store._operations_read() as conn:
        rows = conn.execute(store.sql.reads.consumed_signals, {"p_run_id": run_id}).all()
    return [ConsumedSignal(*row) for row in rows]


def current_steps(store: Store, run_ids: list[str]) -> dict[str, CurrentStep]:
    """The last recorded step of each run in ``run_ids`` (a page of runs), by run id; a run
    with no step yet is left out."""
    if not run_ids:
        return {}
    with store._operations_read() as conn:
        rows = conn.execute(store.sql.reads.current_steps, {"p_run_ids": run_ids}).all()
    return {row.run_id: CurrentStep(*row) for row in rows}


def steps_page(store: Store, run_id: str, first: int, limit: int) -> list[StepRecord]:
    """At most ``limit`` steps of the run from index ``first`` on, in order: a long history
    is read a page at a time, never whole."""
    values = {"p_run_id": run_id, "p_first": first, "p_limit": limit}
    with store._operations_read() as conn:
        rows = conn.execute(store.sql.reads.steps_page, values).all()
    return [StepRecord(*row) for row in rows]


def count_steps(store: Store, run_id: str) -> int:
    """How many steps the run has recorded."""
    with store._operations_read() as conn:
        return int(conn.execute(store.sql.reads.count_steps, {"p_run_id": run_id}).scalar_one())


def step_at(store: Store, run_id: str, idx: int) -> StepRecord | None:
    """The run's step at ``idx``, or None."""
    with store._operations_read() as conn:
        row = conn.execute(store.sql.steps.get_step, {"p_run_id": run_id, "p_idx": idx}).first()
    return None if row is None else StepRecord(*row)
