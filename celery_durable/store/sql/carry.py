"""The settle that carries deferred steps' records, in one statement (Postgres).

A workflow whose last steps were deferred settles with their records: instead of a pipelined
``BEGIN; record_step x k; settle_run; COMMIT``, one statement: the fenced settle UPDATE, and
an INSERT of every carried record (``json_to_recordset`` of one JSON parameter) fed from
the UPDATE's RETURNING, so the records are written exactly when the settle is, and only while
the run is live (not cancel-requested), as ``record_step`` would have written them.

Example::

    sql = CarryStatements(build_tables("durable_"), dialect_of("postgresql"), "default", runs)
    sql.settle_run      # WITH changed AS (UPDATE ...), carried AS (INSERT ...) SELECT ...
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, Integer, Text, bindparam, cast, column, func, literal, select, true
from sqlalchemy.dialects.postgresql import JSON

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.records import StepRecord
from celery_durable.store.schema import Tables
from celery_durable.store.sql.build import Builder, began_ago

if TYPE_CHECKING:
    from celery_durable.store.sql.runs import RunStatements

# The carried records' columns, as ``record_step`` gets them (``step_params``). ``ago``:
# seconds since the step began (``started_at``). One JSON array of objects carries them all:
# dumping one text parameter costs far less than an array parameter per column.
CARRIED_COLUMNS = (
    ("idx", Integer),
    ("name", Text),
    ("status", Text),
    ("input", Text),
    ("output", Text),
    ("error", Text),
    ("duration", Float),
    ("ago", Float),
)


def carried_params(carried: Sequence[StepRecord]) -> dict[str, Any]:
    """``p_carried``: the ``carried`` records as one JSON array, each object holding the
    values ``record_step`` would get for it (``step_params``)."""
    now = time.monotonic()
    records = [
        {
            "idx": step.idx,
            "name": step.name,
            "status": step.status,
            "input": step.input,
            "output": step.output,
            "error": step.error,
            "duration": step.duration,
            "ago": began_ago(step, now),
        }
        for step in carried
    ]
    return {"p_carried": json.dumps(records, ensure_ascii=False)}


class CarryStatements(Builder):
    """Postgres: ``settle_run`` with the deferred records it carries, one statement."""

    def __init__(
        self, tables: Tables, dialect: Dialect, namespace: str, runs: RunStatements
    ) -> None:
        super().__init__(tables, dialect, namespace)
        self.settle_run: Any = None
        if not self.dialect.writes_in_ctes:
            return  # SQLite writes them in one BEGIN IMMEDIATE transaction instead
        steps = tables.steps
        run = tables.runs.c
        changed = runs.settle_update.returning(
            run.id, run.status, run.cancel_requested, run.attempts
        ).cte("changed")
        records = (
            func.json_to_recordset(cast(bindparam("p_carried", type_=Text), JSON))
            .table_valued(*(column(name, type_) for name, type_ in CARRIED_COLUMNS))
            .render_derived(name="carried_steps", with_types=True)
        )
        row = {
            "namespace": literal(namespace),
            "run_id": changed.c.id,
            "idx": records.c.idx,
            "name": records.c.name,
            "status": records.c.status,
            "input": records.c.input,
            "output": records.c.output,
            "error": records.c.error,
            "created_at": self.now,
            "duration": records.c.duration,
            "started_at": self.now - records.c.ago,
            # The settle does not change the attempt: the one of the claim that ran them.
            "attempt": changed.c.attempts,
        }
        # Written only while the run is live: the settle matched (same fence, running) and
        # no cancel was requested (RETURNING gives the row's unchanged flag).
        source = (
            select(*row.values())
            .select_from(changed.join(records, true()))
            .where(changed.c.cancel_requested.is_(False))
        )
        ins = self.insert(steps).from_select(list(row), source)
        carry = ins.on_conflict_do_update(
            index_elements=[steps.c.namespace, steps.c.run_id, steps.c.idx],
            set_={
                **{
                    name: ins.excluded[name]
                    for name in ("name", "status", "input", "output", "error", "created_at")
                },
                **self.step_resumed(ins.excluded),
            },
            where=steps.c.status != "ok",
        ).cte("carried")
        channel = f"{tables.runs.name.removesuffix('runs')}events"
        # ``carried`` is not read: a data-modifying CTE runs to completion all the same
        # (after the SELECT, from the UPDATE's RETURNING rows).
        self.settle_run = (
            select(
                changed.c.id,
                changed.c.status,
                func.pg_notify(channel, literal(namespace + ":").concat(changed.c.id)),
            )
            .select_from(changed)
            .add_cte(carry)
        )
