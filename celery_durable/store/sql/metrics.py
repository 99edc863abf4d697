"""The SQL of ``durable metrics``: every figure the Prometheus endpoint serves, read from
the tables, so it is right for a whole fleet of workers (see ``store/metrics.py``).

Each attribute is named after the ``StoreMetrics``
method that runs it. Histograms come back as cumulative bucket counts (``le_0``, ``le_1``,
...), a count and a sum per label.

Example::

    sql = MetricStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.run_figures        # SELECT name, status, count(*), ... GROUP BY name, status
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, case, func, literal, or_, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder

# Upper bounds (seconds) of the histograms' buckets; +Inf is the count.
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Steps the engine records for waits: their "duration" is the wait, not work.
ENGINE_STEP_PREFIX = "celery_durable."


def _histogram(label: Any, value: Any, bounds: Sequence[float]) -> list[Any]:
    """Columns of a histogram of ``value`` grouped by ``label``."""
    one = literal(1)
    columns = [
        func.sum(case((value <= bound, one), else_=0)).label(f"le_{i}")
        for i, bound in enumerate(bounds)
    ]
    return [label.label("label"), *columns, func.count().label("count"), func.sum(value)]


class MetricStatements(Builder):
    """Runs by workflow and status with their ages and backlogs; step durations; items by
    step and status, and their durations; signal latencies."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
        runs, steps, signals, now = tables.runs, tables.steps, tables.signals, self.now
        greatest = self.dialect.greatest
        ready = or_(runs.c.ready_at.is_(None), runs.c.ready_at <= now)
        # A pending run is startable since its last change (start, wake-up, the sweeper's
        # re-dispatch) or, for a retry or countdown, since its ready time.
        pending_since = greatest(runs.c.updated_at, func.coalesce(runs.c.ready_at, 0.0))
        self.run_figures = (
            select(
                runs.c.name,
                runs.c.status,
                func.count().label("runs"),
                func.count(runs.c.started_at).label("started"),
                func.coalesce(func.sum(runs.c.recoveries), 0).label("recoveries"),
                func.sum(case((runs.c.due_at <= now, 1), else_=0)).label("due"),
                func.sum(
                    case((and_(runs.c.status == "RUNNING", runs.c.due_at < now), 1), else_=0)
                ).label("expired"),
                func.min(
                    case((and_(runs.c.status == "PENDING", ready), pending_since), else_=None)
                ).label("pending_since"),
                func.min(case((runs.c.status == "WAITING", runs.c.updated_at), else_=None)).label(
                    "waiting_since"
                ),
                func.max(now).label("now"),
            )
            .where(self.ns)
            .group_by(runs.c.name, runs.c.status)
        )

        # A step's duration as the worker measured it (in-process retries included);
        # the engine's own records (waits, fan-outs, children) are left out.
        timed = (
            select(steps.c.name, steps.c.duration.label("duration"))
            .where(
                steps.c.namespace == namespace,
                steps.c.status == "ok",
                steps.c.duration.isnot(None),
                ~steps.c.name.startswith(ENGINE_STEP_PREFIX, autoescape=True),
            )
            .subquery("timed")
        )
        self.step_durations = select(
            *_histogram(timed.c.name, timed.c.duration, STEP_BUCKETS)
        ).group_by(timed.c.name)

        # Items of fan-outs (a child's item is its run, counted with the runs).
        items = tables.items
        own = and_(items.c.namespace == namespace, items.c.child_id.is_(None))
        self.item_figures = (
            select(items.c.name, items.c.status, func.count())
            .where(own)
            .group_by(items.c.name, items.c.status)
        )
        # From the fan-out's dispatch to the item's record: queueing, retries and all.
        settled = (
            select(items.c.name, (items.c.finished_at - items.c.created_at).label("duration"))
            .where(own, items.c.status.in_(("ok", "error")), items.c.finished_at.isnot(None))
            .subquery("settled")
        )
        self.item_durations = select(
            *_histogram(settled.c.name, settled.c.duration, STEP_BUCKETS)
        ).group_by(settled.c.name)

        # From the signal's storing to its consumption by the run it woke.
        consumed = (
            select(signals.c.name, (signals.c.consumed_at - signals.c.created_at).label("latency"))
            .where(
                signals.c.namespace == namespace,
                signals.c.consumed_at.isnot(None),
                signals.c.error.is_(None),
            )
            .subquery("consumed")
        )
        self.signal_latencies = select(
            *_histogram(consumed.c.name, consumed.c.latency, LATENCY_BUCKETS)
        ).group_by(consumed.c.name)
