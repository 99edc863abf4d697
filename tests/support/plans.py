"""The Postgres plans of the statements a store runs during an action, over a table filled
for them: what a test reads to show a statement the sweeper runs every poll reads an
index's range, not every row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from celery_durable.store import Store


def fill_analysed(store: Store, table: str, columns: str, select: str, rows: int) -> None:
    """Insert ``rows`` rows into ``table`` (``columns``), each made by ``select`` from ``g``
    (1 to ``rows``) and ``:ns`` (the store's namespace), then ANALYZE it: a table the size
    at which a plan that reads every row shows."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO {table} ({columns}) SELECT {select} "
                "FROM generate_series(1, :rows) AS g"
            ),
            {"ns": store.namespace, "rows": rows},
        )
        conn.execute(sa.text(f"ANALYZE {table}"))


def plans_during(store: Store, action: Callable[[], Any], matching: str) -> list[str]:
    """The ``EXPLAIN`` of each statement containing ``matching`` that ``action()`` ran on
    ``store``, with its own parameters (the statement then runs as usual)."""
    plans: list[str] = []

    def explain(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if matching in statement and not executemany:
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(str(row[0]) for row in cursor.fetchall()))
        return statement, parameters

    sa.event.listen(store.engine, "before_cursor_execute", explain, retval=True)
    try:
        action()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", explain)
    return plans
