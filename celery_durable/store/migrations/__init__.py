"""Alembic migrations of celery_durable's tables, in their own version table.

Example::

    durable.migrate()              # or: celery -A shop durable migrate
    print(durable.migrate(sql=True))   # the DDL, for a DBA to review
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config

if TYPE_CHECKING:
    from ..store import Store

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


def upgrade(store: Store, revision: str = "head", sql: bool = False) -> str | None:
    """Upgrade to ``revision``; with ``sql`` return the DDL instead of running it."""
    if sql:
        buffer = io.StringIO()
        command.upgrade(alembic_config(store, buffer), revision, sql=True)
        return buffer.getvalue()
    command.upgrade(alembic_config(store), revision)
    return None


def current(store: Store) -> str | None:
    from alembic.migration import MigrationContext

    with store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": f"{store.table_prefix}alembic_version"}
        )
        return context.get_current_revision()
