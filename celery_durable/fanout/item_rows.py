"""A fan-out's item rows in one INSERT fed by one JSON parameter (Postgres).

``cd.map`` of 1,000 items inserted its rows as an executemany of 1,000 parameter sets: each
a statement of its own on the server, about 0.05 s for 1,000 here, on the body's critical
path before the first item is published. One ``INSERT ... SELECT`` over
``json_array_elements_text`` of one JSON array (the items' encoded inputs, in item order,
numbered by ``WITH ORDINALITY``) writes the same rows in one statement, as the settle's
carried records (``carry.py``) and a batch's outcomes (``batches.py``) are written. SQLite
keeps the executemany: it runs in-process, without round trips.

Example::

    stmt = fanout_rows(build_tables("durable_"), dialect_of("postgresql"), "default")
    conn.execute(stmt, {"p_inputs": '["[[0],{}]","[[1],{}]"]', "p_first": 0, ...})
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Integer, String, Text, bindparam, cast, false, func, literal, select
from sqlalchemy import true as sql_true
from sqlalchemy.dialects.postgresql import JSON

from celery_durable.store.db.dialect import Dialect
from celery_durable.store.schema import Tables


def fanout_rows(tables: Tables, dialect: Dialect, namespace: str) -> Any:
    """INSERT the items ``p_first`` on of step ``p_idx`` of run ``p_run_id``, one per
    element of ``p_inputs`` (a JSON array of their encoded inputs); the same rows as
    ``insert_fanout_items``: pending, awaited, dispatched once, due after the grace.
    None off Postgres."""
    if not dialect.writes_in_ctes:
        return None
    items, now = tables.items, dialect.now
    inputs = (
        func.json_array_elements_text(cast(bindparam("p_inputs", type_=Text), JSON))
        .table_valued("value", with_ordinality="n")
        .render_derived(name="inputs")
    )
    row = {
        "namespace": literal(namespace, String),
        "run_id": bindparam("p_run_id", type_=String),
        "idx": bindparam("p_idx", type_=Integer),
        "item": bindparam("p_first", type_=Integer) + inputs.c.n - 1,
        "name": bindparam("p_name", type_=String),
        "status": literal("pending", String),
        "queue": bindparam("p_queue", type_=String),
        "input": inputs.c.value,
        "attempts": literal(0, Integer),
        "recoveries": literal(0, Integer),
        "awaited": sql_true(),
        "created_at": now,
        "dispatches": literal(1, Integer),
        "detached": false(),
        "due_at": now + bindparam("p_grace", type_=Float),
        "batch_size": bindparam("p_batch_size", type_=Integer),
    }
    source = select(*row.values()).select_from(inputs)
    return dialect.insert(items).from_select(list(row), source).on_conflict_do_nothing()
