"""Alembic migrations of celery_durable's tables, in their own version table.

Example::

    durable.migrate()              # or: celery -A shop durable migrate
    print(durable.migrate(sql=True))   # the DDL, for a DBA to review
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config

if TYPE_CHECKING:
    from celery_durable.store.store import Store

HERE = os.path.dirname(__file__)


def alembic_config(store: Store, output: io.StringIO | None = None) -> Config:
    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", HERE)
    config.set_main_option(
        "sqlalchemy.url", store.url.render_as_string(hide_password=False).replace("%", "%%")
    )
    config.attributes["table_prefix"] = store.table_prefix
    config.attributes["store"] = store
    return config


@dataclass(frozen=True)
class Migrated:
    """What an upgrade did: the revision it found (``None``: no tables yet) and the one it
    left, read under the migration lock; ``str()`` says which in one line."""

    table_prefix: str
    before: str | None
    after: str | None
    head: str | None

    def __str__(self) -> str:
        tables = f"celery_durable tables ({self.table_prefix}*)"
        after = f"{self.after} (head)" if self.after == self.head else str(self.after)
        if self.before == self.after:
            return f"{tables} already at {after}, nothing to do"
        if self.before is None:
            return f"{tables} created at revision {after}"
        return f"{tables} upgraded from {self.before} to {after}"


def upgrade(store: Store, revision: str = "head", sql: bool = False) -> str | Migrated:
    """Upgrade to ``revision`` and say what it did; with ``sql`` return the DDL instead of
    running it."""
    if sql:
        buffer = io.StringIO()
        command.upgrade(alembic_config(store, buffer), revision, sql=True)
        return buffer.getvalue()
    config = alembic_config(store)
    command.upgrade(config, revision)
    return Migrated(
        table_prefix=store.table_prefix,
        # env.py reads both inside the lock: another migrator may have gone first.
        before=config.attributes["revision_before"],
        after=config.attributes["revision_after"],
        head=config.attributes["revision_head"],
    )


def current(store: Store) -> str | None:
    from alembic.migration import MigrationContext

    with store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": f"{store.table_prefix}alembic_version"}
        )
        return context.get_current_revision()
