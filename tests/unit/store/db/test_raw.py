"""The hot path's statements compiled to Postgres's ``$n`` placeholders (``db/raw.py``), sent
through psycopg's RawCursor: a literal ``%`` stays one, a parameter used twice is bound
once, a statement past psycopg's 4,096-byte cache runs like any other, and every statement
of the store (but those with an expanding IN, which only SQLAlchemy's path runs) compiles
with no ``%(name)s`` placeholder left and its ``$n`` numbered from 1 with no gap."""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from celery_durable.store import Store
from celery_durable.store.db.raw import compile_raw, positional_dialect


def test_the_fast_path_keeps_a_literal_percent_binds_a_parameter_once_and_runs_a_long_statement(
    pg_store: Store,
) -> None:
    n: Any = sa.bindparam("p_n", type_=sa.Integer)
    padding = "x" * 5000  # past psycopg's cache of converted queries (4,096 bytes)
    stmt = sa.select(sa.literal_column("'50%'"), n % 7, n + 1).where(
        sa.text(f"length('{padding}') = 5000")
    )
    compiled = compile_raw(stmt, positional_dialect(pg_store.engine.dialect))
    assert len(compiled.sql) > 4096 and compiled.names.count("p_n") == 1
    assert pg_store.db.one(stmt, {"p_n": 10}) == ("50%", 3, 11)
    assert pg_store.db.one(stmt, {"p_n": 15}) == ("50%", 1, 16)  # the prepared plan's


def test_every_statement_of_the_store_compiles_to_postgres_placeholders(pg_store: Store) -> None:
    dialect = positional_dialect(pg_store.engine.dialect)
    statements = list(_statements(pg_store.sql))
    for name, area in pg_store.areas.items():  # each wing's, built by its store area
        statements += _statements(vars(area)["sql"], f"store.{name}.sql")
    assert len(statements) > 200
    for name, stmt in statements:
        compiled = compile_raw(stmt, dialect)
        if b"__[POSTCOMPILE_" in compiled.sql:
            continue  # an expanding IN: SQLAlchemy's path expands it, never the fast path
        assert b"%(" not in compiled.sql, name
        numbers = {int(x) for x in re.findall(rb"\$(\d+)", compiled.sql)}
        assert numbers == set(range(1, len(compiled.names) + 1)), name


def _statements(obj: Any, path: str = "sql", depth: int = 0) -> Any:
    """Every SQLAlchemy statement among the attributes of the store's statement groups."""
    for name, value in vars(obj).items():
        if isinstance(value, (sa.Select, sa.Insert, sa.Update, sa.Delete)):
            yield f"{path}.{name}", value
        elif depth < 2 and type(value).__name__.endswith("Statements"):
            yield from _statements(value, f"{path}.{name}", depth + 1)
