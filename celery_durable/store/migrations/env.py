"""Alembic environment: the version table carries the table prefix.

Each revision runs in its own transaction, so one may build indexes CONCURRENTLY outside
any (``autocommit_block``). On Postgres a session-level advisory lock, taken by polling
outside a transaction, keeps two migrators apart: a migrator blocked inside a transaction
would hold a snapshot that a concurrent index build must wait for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy import Connection

from celery_durable.store.schema import build_tables

config = context.config
prefix: str = config.attributes.get("table_prefix", "durable_")
target_metadata = build_tables(prefix).metadata
version_table = f"{prefix}alembic_version"


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        version_table=version_table,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


@contextmanager
def migration_lock(connection: Connection) -> Iterator[None]:
    """Two migrators at once (two workers' deploy hooks) take turns on Postgres."""
    if connection.dialect.name != "postgresql":
        yield
        return
    level = connection.get_isolation_level()
    connection.execution_options(isolation_level="AUTOCOMMIT")
    sql = "SELECT pg_try_advisory_lock(hashtext(%s))"
    while not connection.exec_driver_sql(sql, (version_table,)).scalar():
        time.sleep(0.1)
    connection.commit()  # end SQLAlchemy's autobegun block: Alembic starts its own
    connection.execution_options(isolation_level=level)
    try:
        yield
    finally:
        connection.rollback()
        connection.execution_options(isolation_level="AUTOCOMMIT")
        connection.exec_driver_sql("SELECT pg_advisory_unlock(hashtext(%s))", (version_table,))
        connection.commit()


def run_online() -> None:
    store = config.attributes["store"]
    # A fresh engine in transactional mode: the store's Postgres engine autocommits.
    from sqlalchemy import create_engine

    # Its connect_args: no server-side prepared statements behind PgBouncer.
    engine = create_engine(store.url, connect_args=store.db.connect_args())
    try:
        with engine.connect() as connection, migration_lock(connection):
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                version_table=version_table,
                transaction_per_migration=True,
            )
            migrations = context.get_context()
            # What upgrade() reports (created, upgraded or nothing to do).
            config.attributes["revision_before"] = migrations.get_current_revision()
            config.attributes["revision_head"] = context.script.get_current_head()
            with context.begin_transaction():
                context.run_migrations()
            config.attributes["revision_after"] = migrations.get_current_revision()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
