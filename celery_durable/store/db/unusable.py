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

import click
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
_app_given: str | None = None


@dataclasses.dataclass(frozen=True)
class Unusable:
    """Why the database can't serve the store (``kind``: TABLES, DATABASE or AUTH), in the
    driver's words (``text``, its first line)."""

    kind: str
    text: str

    def fix(self, app: str | None = None) -> str:
        """What to do about it; ``app``: the ``-A`` argument of the user's commands
        (default: the one this process was started with, when click knows it)."""
        if self.kind == TABLES:
            app = app or app_argument()
            return (
                f"run `celery -A {app} durable migrate` (durable_table_prefix and "
                "durable_database_url say where the tables go)"
            )
        if self.kind == DATABASE:
            return "create the database (SQLite: its directory), or correct durable_database_url"
        return "correct the user or password in durable_database_url"


def app_argument() -> str:
    """The ``-A`` argument of the celery command this process runs (a worker's pool
    processes are forked inside it), to name in a fix; ``<your app>`` when unknown.
    Remembered: a worker's threads (the sweeper's) have no click context of their own."""
    global _app_given  # noqa: PLW0603 - one command line per process
    ctx = click.get_current_context(silent=True)
    given = ctx.find_root().params.get("app") if ctx is not None else None
    if isinstance(given, str) and given:
        _app_given = given
    return _app_given or "<your app>"


def _is_driver_error(exc: BaseException) -> bool:
    if psycopg is not None and isinstance(exc, psycopg.Error):
        return True
    return isinstance(exc, sqlite3.Error)


def unusable(exc: BaseException, table_prefix: str) -> Unusable | None:
    """What makes the database unusable, when ``exc`` (or the driver error SQLAlchemy
    wraps) says it doesn't exist, refused the credentials, or lacks a table or column of
    the store (one whose name starts with ``table_prefix``); None for anything else."""
    inner: BaseException = exc
    for _ in range(5):  # the driver error is at most a couple of wrappings deep
        if isinstance(inner, sa_exc.StatementError) and inner.orig is not None:
            inner = inner.orig
        elif _is_driver_error(inner) or inner.__cause__ is None:
            break
        else:  # an error of ours raised from the driver's (Store.raise_if_tables_missing)
            inner = inner.__cause__
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
