"""Database outages: tell "the server can't be reached" from other errors, and say so.

A refused or reset connection, a server restarting or shutting down, too many clients:
these pass, so readers retry them (``handle.get``, ``durable show``) and background loops
back off; any other database error is a bug or a schema problem and is raised at once.

Example::

    try:
        run = store.get_run(run_id)
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        raise unavailable(exc, store.url, f"reading run {run_id!r}") from exc
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

from celery_durable.core.redact import mask_urls
from celery_durable.errors import DatabaseUnavailable
from celery_durable.store.db.unusable import unusable

try:  # the Postgres driver is optional: SQLite needs none
    import psycopg
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    psycopg = None  # type: ignore[assignment]

T = TypeVar("T")

# SQLSTATE classes of a server that is gone or refusing: connection exception (08),
# insufficient resources (53: too many connections), operator intervention (57P:
# admin/crash shutdown, "the database system is starting up").
_UNREACHABLE_STATES = ("08", "53", "57P")


def is_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` (or the driver error SQLAlchemy wraps) says the database server
    can't be reached or dropped the connection; False for every other error."""
    current: BaseException | None = exc
    for _ in range(5):  # the driver error is at most a couple of wrappings deep
        if current is None:
            return False
        if isinstance(current, sa_exc.DisconnectionError):
            return True
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if psycopg is not None and isinstance(current, psycopg.OperationalError):
            state = current.sqlstate
            return state is None or state.startswith(_UNREACHABLE_STATES)
        if psycopg is not None and isinstance(current, psycopg.InterfaceError):
            return "closed" in str(current) or "lost" in str(current)
        if isinstance(current, sqlite3.OperationalError):
            return "unable to open" in str(current)
        if isinstance(current, sa_exc.StatementError) and current.orig is not None:
            current = current.orig
        else:
            current = current.__cause__
    return False


def describe(url: URL) -> str:
    """The database URL without its password (in the URL or its query), for messages
    and logs."""
    return mask_urls(url.render_as_string(hide_password=True))


def summary(exc: BaseException) -> str:
    """The driver's message, first line only (psycopg adds hints on further lines)."""
    inner: Any = exc.orig if isinstance(exc, sa_exc.StatementError) and exc.orig else exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


def unavailable(exc: BaseException, url: URL, what: str) -> DatabaseUnavailable:
    """The error to raise (``from exc``) for ``what`` failing on an unreachable database."""
    database = describe(url)
    return DatabaseUnavailable(f"{what}: the database {database} is unreachable: {summary(exc)}")


def retry_while_unreachable(
    call: Callable[[], T], timeout: float, url: URL, what: str, pause: float = 0.1
) -> T:
    """``call()``, tried again while the database is unreachable, for up to ``timeout``
    seconds (pauses double up to 1 s); then DatabaseUnavailable naming ``what``. An
    unusable database (``unusable.py``) raises at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Exception as exc:
            remaining = deadline - time.monotonic()
            # A database that doesn't exist or refuses the credentials won't come back.
            if not is_unreachable(exc) or unusable(exc, "") is not None:
                raise
            if remaining <= 0:
                raise unavailable(exc, url, f"{what} (tried for {timeout:g}s)") from exc
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, 1.0)
