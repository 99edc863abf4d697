"""Statements, round trips and transactions of the waits wing's store operations, on
Postgres and SQLite: run on two checkouts, the outputs must be equal (same SQL, same count).

Run from the repository's root: ``PYTHONPATH=$PWD python tools/measure_waits_statements.py``.
"""

from __future__ import annotations

import hashlib
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from celery_durable.store import StepRecord, Store
from celery_durable.store.migrations import upgrade
from tests.support.builders import claimed
from tests.support.pgwire import messages_in, trace_text
from tests.support.services import PG_URL, drop_tables, unique


def waits(store: Store) -> Any:
    return getattr(store, "waits", store)  # store.waits on the branch, the mixins on main


def measured(store: Store, name: str, call: Callable[[], Any]) -> str:
    if store.is_postgres:
        return on_the_wire(store, name, call)
    sql: list[str] = []
    begins: list[int] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sql.append(statement)

    def began(conn: Any) -> None:
        begins.append(1)

    event.listen(store.engine, "before_cursor_execute", seen)
    event.listen(store.engine, "begin", began)
    try:
        call()
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
        event.remove(store.engine, "begin", began)
    text = "\n".join(sql).replace(store.table_prefix, "P_")
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{name:28} statements {len(sql)}  begins {len(begins)}  sql {digest}"


def on_the_wire(store: Store, name: str, call: Callable[[], Any]) -> str:
    """Postgres: the protocol's messages (the fast path bypasses SQLAlchemy's events)."""
    text = trace_text(store, call).replace(store.table_prefix, "P_")
    kinds = messages_in(text)
    executes = kinds.count("F Execute") + kinds.count("F Query")
    syncs = kinds.count("F Sync") + kinds.count("F Query")
    parses = [line for line in text.splitlines() if "\tParse\t" in line or "\tQuery\t" in line]
    digest = hashlib.sha1("\n".join(parses).encode()).hexdigest()[:10]
    return f"{name:28} executes {executes}  round trips {syncs}  sql {digest}"


def scenario(store: Store) -> list[str]:
    lines = []
    fence = claimed(store, "m1")
    step = StepRecord(0, "celery_durable.signal:go", "waiting", "[]", "{}", None)
    carried = [StepRecord(1, "d", "ok", "[[],{}]", "1", None, 0.0)]
    w = waits(store)
    lines.append(measured(store, "set_state", lambda: w.set_state("m1", fence, "k", "1")))
    lines.append(
        measured(store, "set_state carrying", lambda: w.set_state("m1", fence, "k", "2", carried))
    )
    lines.append(measured(store, "get_state", lambda: w.get_state("m1", "k")))
    lines.append(
        measured(store, "suspend_run", lambda: w.suspend_run("m1", fence, step, "go", None))
    )
    lines.append(
        measured(store, "insert_signal", lambda: w.insert_signal("m1", "other", "1", None, 9))
    )
    lines.append(measured(store, "cancel_run (waiting)", lambda: store.cancel_run("m1", "x")))
    fence = claimed(store, "m2")
    lines.append(measured(store, "cancel_run (running)", lambda: store.cancel_run("m2", "x")))
    return lines


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for url in (PG_URL, f"sqlite:///{pathlib.Path(tmp) / 's.sqlite3'}"):
            prefix = unique("m")[:9] + "_"
            store = Store(url, prefix, "ns")
            upgrade(store)
            try:
                print(store.dialect.name)
                print("\n".join("  " + line for line in scenario(store)))
            finally:
                store.dispose()
                if url == PG_URL:
                    drop_tables(PG_URL, prefix)


if __name__ == "__main__":
    main()
