"""Reads only the dashboard needs: recent run durations (p50/p95), an id prefix search, a
run's consumed signals and the current (last recorded) step of each run on a page.

Each goes through the settled-run indexes or the primary key and stops at a limit, so it
costs the same with a million finished runs as with a hundred. The statements are built
once per store, from the store's own tables, without touching the hot path's statements.

Example::

    durations = recent_durations(store, seconds=3600)   # {"shop.checkout": [0.4, 1.2, ...]}
    runs = runs_by_id_prefix(store, "order-4", limit=50)
    taken = consumed_signals(store, "order-42")          # [ConsumedSignal(...), ...]
    current = current_steps(store, ["order-42", "order-43"])  # {"order-42": CurrentStep}
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select

from celery_durable.store.records import RunSummary
from celery_durable.store.sql.admin import settled, status_literal
from celery_durable.store.sql.build import Builder, columns_of

if TYPE_CHECKING:
    from celery_durable.store.store import Store

# How many consumed signals a run page lists at most (the oldest first).
CONSUMED_LIMIT = 100
# How many recent runs the percentiles read at most (the newest): enough for a p95.
DURATION_SAMPLE = 20_000
_built: weakref.WeakKeyDictionary[Any, DashboardStatements] = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class ConsumedSignal:
    """A signal the run took (``wait_for_signal`` returned its payload)."""

    name: str
    payload: str
    idempotency_key: str | None
    created_at: float
    consumed_at: float


@dataclasses.dataclass(frozen=True)
class CurrentStep:
    """A run's last recorded step: where it is now, or where it ended."""

    run_id: str
    idx: int
    name: str
    status: str


class DashboardStatements(Builder):
    """The dashboard's reads, for one store's tables, dialect and namespace."""

    def __init__(self, store: Store) -> None:
        ops = store.sql.ops
        super().__init__(ops.tables, "postgresql" if ops.is_postgres else "sqlite", ops.namespace)
        runs = self.tables.runs
        # One index range per finished status (ix_<prefix>runs_status), newest first.
        self.recent_durations = [
            select(runs.c.name, (runs.c.finished_at - runs.c.started_at).label("took"))
            .where(
                self.ns,
                settled(runs),
                runs.c.status == status_literal(status),
                runs.c.created_at >= self.now - bindparam("p_seconds"),
                runs.c.started_at.isnot(None),
                runs.c.finished_at.isnot(None),
            )
            .order_by(runs.c.created_at.desc())
            .limit(DURATION_SAMPLE)
            for status in ("SUCCEEDED", "FAILED")
        ]
        # The primary key (namespace, id): the range of ids that start with the prefix (in a
        # byte-wise collation such as C.UTF-8), then LIKE to be exact whatever the collation.
        self.runs_by_id_prefix = (
            select(*columns_of(runs, RunSummary))
            .where(
                self.ns,
                runs.c.id >= bindparam("p_prefix"),
                runs.c.id < bindparam("p_prefix_end"),
                runs.c.id.like(bindparam("p_pattern"), escape="\\"),
            )
            .order_by(runs.c.id)
            .limit(bindparam("p_limit"))
        )

        signals = self.tables.signals
        # The unique key (namespace, run_id, idempotency_key) finds one run's signals.
        self.consumed_signals = (
            select(*columns_of(signals, ConsumedSignal))
            .where(
                signals.c.namespace == self.namespace,
                signals.c.run_id == bindparam("p_run_id"),
                signals.c.consumed_at.isnot(None),
            )
            .order_by(signals.c.id)
            .limit(CONSUMED_LIMIT)
        )

        steps, last = self.tables.steps, self.tables.steps.alias("last")
        # One primary-key probe per run of the page: the highest idx of (namespace, run_id).
        highest = (
            select(func.max(last.c.idx))
            .where(last.c.namespace == steps.c.namespace, last.c.run_id == steps.c.run_id)
            .scalar_subquery()
        )
        self.current_steps = select(*columns_of(steps, CurrentStep)).where(
            steps.c.namespace == self.namespace,
            steps.c.run_id.in_(bindparam("p_run_ids", expanding=True)),
            steps.c.idx == highest,
        )


def statements_of(store: Store) -> DashboardStatements:
    built = _built.get(store)
    if built is None:
        built = _built[store] = DashboardStatements(store)
    return built


def recent_durations(store: Store, seconds: float = 3600.0) -> dict[str, list[float]]:
    """Durations (seconds) of the finished (succeeded or failed) runs created in the last
    ``seconds``, by workflow, sorted; at most ``DURATION_SAMPLE`` per status."""
    found: dict[str, list[float]] = {}
    with store._operations_read() as conn:
        for statement in statements_of(store).recent_durations:
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
        rows = conn.execute(statements_of(store).runs_by_id_prefix, values).all()
    return [RunSummary(*row) for row in rows]


def consumed_signals(store: Store, run_id: str) -> list[ConsumedSignal]:
    """The signals the run consumed, oldest first (at most ``CONSUMED_LIMIT``)."""
    with store._operations_read() as conn:
        rows = conn.execute(statements_of(store).consumed_signals, {"p_run_id": run_id}).all()
    return [ConsumedSignal(*row) for row in rows]


def current_steps(store: Store, run_ids: list[str]) -> dict[str, CurrentStep]:
    """The last recorded step of each run in ``run_ids`` (a page of runs), by run id; a run
    with no step yet is left out."""
    if not run_ids:
        return {}
    with store._operations_read() as conn:
        rows = conn.execute(statements_of(store).current_steps, {"p_run_ids": run_ids}).all()
    return {row.run_id: CurrentStep(*row) for row in rows}
