"""The reads behind ``celery -A app durable metrics``; the SQL is in ``sql/metrics.py``.

Every figure comes from the tables, not from worker processes: one endpoint is right for
a whole fleet (prefork children, many hosts, restarts) with nothing shared between
workers. Reads are whole-namespace aggregates: the endpoint caches them between scrapes.

Example::

    metrics = StoreMetrics(store)
    for figure in metrics.run_figures():
        print(figure.workflow, figure.status, figure.runs)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from celery_durable.store.sql.metrics import LATENCY_BUCKETS, STEP_BUCKETS

if TYPE_CHECKING:
    from celery_durable.store.store import Store


@dataclasses.dataclass(frozen=True)
class RunFigures:
    """The runs of one workflow in one status."""

    workflow: str
    status: str
    runs: int
    started: int  # runs that were claimed at least once
    recoveries: int  # times their workers were lost
    due: int  # due_at passed: the sweeper's backlog
    expired: int  # RUNNING with an expired lease
    pending_age: float | None  # seconds the oldest startable PENDING run has waited
    waiting_age: float | None  # seconds the oldest WAITING run has waited


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Cumulative counts per bucket bound, the count and the sum, for one label."""

    label: str
    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    count: int
    total: float


class StoreMetrics:
    """Metric reads of one ``Store`` (its namespace)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sql = store.sql.metrics

    def run_figures(self) -> list[RunFigures]:
        """Runs by workflow and status, with their started, recovery and backlog counts."""
        figures = []
        for row in self.store._all(self.sql.run_figures):  # noqa: SLF001 - the store's reader
            now = float(row.now)
            figures.append(
                RunFigures(
                    workflow=row.name,
                    status=row.status,
                    runs=int(row.runs),
                    started=int(row.started),
                    recoveries=int(row.recoveries),
                    due=int(row.due or 0),
                    expired=int(row.expired or 0),
                    pending_age=_age(now, row.pending_since),
                    waiting_age=_age(now, row.waiting_since),
                )
            )
        return figures

    def step_durations(self) -> list[Histogram]:
        """Durations of recorded steps by step name (waits left out)."""
        return self._histograms(self.sql.step_durations, STEP_BUCKETS)

    def item_figures(self) -> list[tuple[str, str, int]]:
        """Items of fan-outs by step name and status: ``(step, status, count)``."""
        rows = self.store._all(self.sql.item_figures)  # noqa: SLF001 - the store's reader
        return [(str(name), str(status), int(count)) for name, status, count in rows]

    def item_durations(self) -> list[Histogram]:
        """Seconds from a fan-out's dispatch to each settled item's record, by step name."""
        return self._histograms(self.sql.item_durations, STEP_BUCKETS)

    def signal_latencies(self) -> list[Histogram]:
        """Seconds from a signal's storing to its consumption, by signal name."""
        return self._histograms(self.sql.signal_latencies, LATENCY_BUCKETS)

    def _histograms(self, statement: object, bounds: tuple[float, ...]) -> list[Histogram]:
        histograms = []
        for row in self.store._all(statement):  # noqa: SLF001 - the store's reader
            values = tuple(row)
            buckets = tuple(int(v or 0) for v in values[1 : 1 + len(bounds)])
            count, total = values[1 + len(bounds)], values[2 + len(bounds)]
            histograms.append(
                Histogram(str(values[0]), bounds, buckets, int(count), float(total or 0.0))
            )
        return histograms


def _age(now: float, since: float | None) -> float | None:
    return None if since is None else max(0.0, now - float(since))
