"""Starts in Django's transaction: inside ``transaction.atomic()`` on the store's alias,
``.delay()`` inserts the run on Django's connection, in the caller's transaction, and
publishes it from ``transaction.on_commit``; a rollback (of the block, or of the savepoint
the start was in) means the run never existed. Outside a block (autocommit) a start is as
anywhere else.

Only a store built from ``DATABASES`` joins: a store given its own
``CELERY_DURABLE_DATABASE_URL`` is another connection, even to the same database, and
starts there commit at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction
from sqlalchemy.engine import URL

from celery_durable.contrib.django.database import from_django
from celery_durable.store.db import foreign, sqlite

_NOT_JOINING = threading.local()


@contextmanager
def not_joining() -> Iterator[None]:
    """Starts in this thread use the store's own connections, even inside ``atomic()``:
    an eager run (``testing``) executes at once, and must see the row it runs."""
    depth = getattr(_NOT_JOINING, "depth", 0)
    _NOT_JOINING.depth = depth + 1
    try:
        yield
    finally:
        _NOT_JOINING.depth = depth


def _joining_off() -> bool:
    return bool(getattr(_NOT_JOINING, "depth", 0))


def django_transaction(durable_config: Any) -> foreign.ForeignTransaction | None:
    """Django's open transaction on the store's alias, if the caller is in one."""
    alias = from_django(durable_config)
    if alias is None or _joining_off():
        return None
    connection = connections[alias]
    if not connection.in_atomic_block:
        return None
    # Django's vendor names are the store's backend names ("postgresql", "sqlite"): the
    # store was built from this alias, which only those engines pass.
    on_commit = django_on_commit(durable_config)
    return foreign.ForeignTransaction(connection.cursor, connection.vendor, on_commit)


def django_on_commit(durable_config: Any) -> Callable[[Callable[[], None]], None]:
    """``transaction.on_commit`` on the store's alias (``durable_database``): the publish
    of a start in Django's transaction, and ``delay_on_commit``'s start. At once outside a
    transaction, never after a rollback."""
    alias = durable_config.database

    def on_commit(then: Callable[[], None]) -> None:
        transaction.on_commit(then, using=alias)

    return on_commit


def django_sqlite_connection(url: URL) -> Any | None:
    """Django's SQLite connection of this thread whose atomic block (a view's, or the one
    ``TestCase`` wraps each test in) holds the file of ``url``: the store runs there, in
    savepoints, since a connection of its own would wait for that block's lock."""
    if not url.database:
        return None
    path = os.path.abspath(url.database)
    for alias in connections:
        if connections.settings[alias].get("ENGINE") != "django.db.backends.sqlite3":
            continue
        connection = connections[alias]
        name = str(connection.settings_dict.get("NAME") or "")
        if connection.in_atomic_block and name and os.path.abspath(name) == path:
            return connection.connection
    return None


def install() -> None:
    if django_transaction not in foreign.CALLER_TRANSACTIONS:
        foreign.CALLER_TRANSACTIONS.append(django_transaction)
    if django_on_commit not in foreign.AFTER_COMMIT:
        foreign.AFTER_COMMIT.append(django_on_commit)
    if django_sqlite_connection not in sqlite.SHARED_SQLITE:
        sqlite.SHARED_SQLITE.append(django_sqlite_connection)
