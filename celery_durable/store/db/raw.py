"""Hot-path statements compiled once to Postgres's own ``$1`` placeholders, for psycopg's
``RawCursor``.

psycopg turns ``%(name)s`` placeholders into ``$1`` on every execute and caches the result
only for a query of at most 4,096 bytes and 50 parameters. Several of the store's hot
statements are longer than that (a limited start with its take, a claim that takes a slot,
a batch's claim: 4.5 to 7 KB with a table prefix), so each execute re-parsed their text in
the caller's process (a run-limited start: about 0.2 ms of its 0.8 ms of CPU in the caller).
Compiled here once, with the placeholders Postgres reads, psycopg sends the text as it is.

Example::

    compiled = compile_raw(stmt, positional_dialect(engine.dialect))
    psycopg.RawCursor(driver).execute(compiled.sql, compiled.args({"p_run_id": run_id}))
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from sqlalchemy.engine import Dialect


class RawStatement(NamedTuple):
    """A statement's SQL (encoded once), its parameters' names in ``$n`` order, and the
    values it binds itself (literals, and None for the ones its caller gives)."""

    sql: bytes
    names: tuple[str, ...]
    defaults: dict[str, Any]

    def args(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """The values in ``$n`` order: ``params`` over the statement's own."""
        given = {**self.defaults, **params}
        return tuple([given[name] for name in self.names])


def positional_dialect(dialect: Dialect) -> Dialect:
    """``dialect`` (connected: it knows the server) rendering ``$1`` placeholders; with its
    own identifier preparer, which then stops doubling a literal ``%`` as ``%%``."""
    raw = copy.copy(dialect)
    raw.paramstyle = "numeric_dollar"
    raw.positional = True
    raw.identifier_preparer = raw.preparer(raw)
    return raw


def compile_raw(stmt: Any, dialect: Dialect) -> RawStatement:
    """``stmt`` compiled for a ``RawCursor`` (``dialect``: from ``positional_dialect``)."""
    done = stmt.compile(dialect=dialect)
    return RawStatement(str(done).encode(), tuple(done.positiontup or ()), dict(done.params))
