"""A transaction the store does not own: a web framework's (Django's) open transaction, on
that framework's connection. The store's statements are compiled for the store's dialect in
the ``format`` parameter style every DB-API driver behind Django takes (``%s``), and run on
the framework's cursor, so they commit or roll back with the caller's work.

Example::

    caller = ForeignTransaction(django_connection.cursor, "postgresql", on_commit)
    store.insert_run(run, caller)       # in the view's transaction

``CALLER_TRANSACTIONS`` holds the functions that find such a transaction for a config (the
Django app adds one); ``caller_transaction`` asks them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine.interfaces import Dialect as SqlDialect

T = TypeVar("T")

# Each takes a store's config and returns the caller's open transaction on that store's
# database, or None (no framework transaction: the store uses its own connections).
CALLER_TRANSACTIONS: list[Callable[[Any], ForeignTransaction | None]] = []


# Each takes a store's config and returns the host framework's "run this once the open
# transaction commits" (Django's transaction.on_commit on the store's alias), or None.
AFTER_COMMIT: list[Callable[[Any], Callable[[Callable[[], None]], None] | None]] = []


def _first_found(sources: Sequence[Callable[[Any], T | None]], config: Any) -> T | None:
    for source in sources:
        found = source(config)
        if found is not None:
            return found
    return None


def after_commit(config: Any) -> Callable[[Callable[[], None]], None] | None:
    """The host framework's on-commit hook for a config, if one is installed."""
    return _first_found(AFTER_COMMIT, config)


def caller_transaction(config: Any) -> ForeignTransaction | None:
    """The framework transaction a start joins, if the caller is in one."""
    return _first_found(CALLER_TRANSACTIONS, config)


def _format_dialect(backend: str) -> SqlDialect:
    if backend == "postgresql":
        return PGDialect_psycopg(paramstyle="format")
    if backend == "sqlite":
        return SQLiteDialect_pysqlite(paramstyle="format")
    raise ValueError(f"no foreign transactions on {backend!r} (postgresql, sqlite)")


class ForeignRows:
    """What ``Connection.execute`` returns, as far as the store reads it on a caller's
    transaction: the first row, or every row."""

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._rows = rows

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def all(self) -> list[tuple[Any, ...]]:
        return list(self._rows)


class ForeignTransaction:
    """The caller's open transaction on a connection the store does not own.

    ``cursor`` makes a DB-API cursor on it (Django's ``connection.cursor``); ``on_commit``
    runs a function once that transaction commits, and never if it rolls back (Django's
    ``transaction.on_commit``).
    """

    def __init__(
        self,
        cursor: Callable[[], Any],
        backend: str,
        on_commit: Callable[[Callable[[], None]], None],
    ) -> None:
        self._cursor = cursor
        self._dialect = _format_dialect(backend)
        self.on_commit = on_commit

    def execute(self, statement: Any, values: dict[str, Any] | None = None) -> ForeignRows:
        compiled = statement.compile(
            dialect=self._dialect, compile_kwargs={"render_postcompile": True}
        )
        bound = compiled.construct_params(values or {})
        processors = compiled._bind_processors  # noqa: SLF001 - SQLAlchemy's own type coercion
        positional = []
        for name in compiled.positiontup or ():
            value = bound[name]
            process = processors.get(name)
            positional.append(process(value) if process is not None else value)
        with self._cursor() as cursor:
            cursor.execute(compiled.string, positional)
            rows = cursor.fetchall() if cursor.description is not None else []
        return ForeignRows([tuple(row) for row in rows])
