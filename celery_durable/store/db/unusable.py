"""A database that answers but can't serve the store as configured: it doesn't exist, it
refuses the credentials, or the tables are missing (or older than the code). Unlike an
outage (``outage.py``) waiting doesn't end these: someone must act, and the message says
what to do.

Example::

    problem = unusable(exc, store.table_prefix)
    if problem is not None:
        raise click.ClickException(f"{problem.text}: {problem.fix('shop')}")
"""

from __future__ import annotations

import dataclasses
import sqlite3

from sqlalchemy import exc as sa_exc

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]

# SQLSTATEs: undefined table and column (the tables are missing or not up to date),
# invalid catalog name (no such database), invalid authorization (bad user or password).
_TABLE_STATES = ("42P01", "42703")
_DATABASE_STATES = ("3D000",)
_AUTH_STATES = ("28000", "28P01")
# A connection attempt's error carries no SQLSTATE in psycopg 3: the server's FATAL text.
_AUTH_TEXTS = ("password authentication failed", "no pg_hba.conf entry", "authentication failed")

TABLES, DATABASE, AUTH = "tables", "database", "authentication"


@dataclasses.dataclass(frozen=True)
class Unusable:
    """Why the database can't serve the store (``kind``: TABLES, DATABASE or AUTH), in the
    driver's words (``text``, its first line)."""

    kind: str
    text: str

    def fix(self, app: str = "<your app>") -> str:
        """What to do about it; ``app``: the ``-A`` argument of the user's commands."""
        if self.kind == TABLES:
            return (
                f"run `celery -A {app} durable migrate` (durable_table_prefix and "
                "durable_database_url say where the tables go)"
            )
        if self.kind == DATABASE:
            return "create the database (SQLite: its directory), or correct durable_database_url"
        return "correct the user or password in durable_database_url"


def unusable(exc: BaseException, table_prefix: str) -> Unusable | None:
    """What makes the database unusable, when ``exc`` (or the driver error SQLAlchemy
    wraps) says it doesn't exist, refused the credentials, or lacks a table or column of
    the store (one whose name starts with ``table_prefix``); None for anything else."""
    inner: BaseException | None = exc
    for _ in range(5):  # the driver error is at most a couple of wrappings deep
        if inner is None or not isinstance(inner, sa_exc.StatementError | sa_exc.DBAPIError):
            break
        inner = inner.orig
    if inner is None:
        return None
    lines = str(inner).strip().splitlines()
    text = lines[0] if lines else type(inner).__name__
    if psycopg is not None and isinstance(inner, psycopg.Error):
        state = inner.sqlstate or ""
        if state in _TABLE_STATES and table_prefix in text:
            return Unusable(TABLES, text)
        if state in _DATABASE_STATES or ('database "' in text and "does not exist" in text):
            return Unusable(DATABASE, text)
        if state in _AUTH_STATES or ('role "' in text and "does not exist" in text):
            return Unusable(AUTH, text)
        if any(phrase in text for phrase in _AUTH_TEXTS):
            return Unusable(AUTH, text)
        return None
    if isinstance(inner, sqlite3.OperationalError):
        missing = text.startswith(("no such table", "no such column")) or "has no column" in text
        if missing and table_prefix in text:
            return Unusable(TABLES, text)
        if "unable to open database file" in text:  # its directory is missing or locked away
            return Unusable(DATABASE, text)
    return None
