"""The statements of the dashboard's reads (``store/reads.py``): recent run durations, an
id prefix search, a run's consumed signals and the current step of each run on a page.

Each goes through the settled-run indexes or the primary key and stops at a limit, so it
costs the same with a million finished runs as with a hundred.

Example::

    sql = ReadStatements(build_tables("durable_"), dialect_of("postgresql"), "default")
    sql.current_steps   # SELECT ... WHERE idx = (SELECT max(idx) ...)
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import and_, bindparam, func, select

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.operation_records import RunSummary
from celery_durable.store.records import StepRecord
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, columns_of
from celery_durable.store.sql.operator_statements import settled, status_literal

# How many consumed signals a run page lists at most (the oldest first).
CONSUMED_LIMIT = 100
# How many recent runs the percentiles read at most (the newest): enough for a p95.
DURATION_SAMPLE = 20_000


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


class ReadStatements(Builder):
    """The dashboard's reads: recent durations, id prefix search, consumed signals,
    current steps."""

    def __init__(self, tables: Tables, dialect: Dialect, namespace: str) -> None:
        super().__init__(tables, dialect, namespace)
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
        # A page of a run's history: a range of the primary key (namespace, run_id, idx).
        of_run = and_(steps.c.namespace == self.namespace, steps.c.run_id == bindparam("p_run_id"))
        self.steps_page = (
            select(*columns_of(steps, StepRecord))
            .where(of_run, steps.c.idx >= bindparam("p_first"))
            .order_by(steps.c.idx)
            .limit(bindparam("p_limit"))
        )
        self.count_steps = select(func.count()).select_from(steps).where(of_run)
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
