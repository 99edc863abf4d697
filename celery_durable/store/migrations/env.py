"""Alembic environment: the version table carries the table prefix."""

from __future__ import annotations

from alembic import context

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
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    store = config.attributes["store"]
    # A fresh engine in transactional mode: the store's Postgres engine autocommits.
    from sqlalchemy import create_engine

    # Its connect_args: no server-side prepared statements behind PgBouncer.
    engine = create_engine(store.url, connect_args=store.db.connect_args())
    try:
        # begin(): the advisory lock opens the transaction, so commit it ourselves.
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Two workers migrating at once must not both create the tables.
                connection.exec_driver_sql(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (version_table,)
                )
            context.configure(
                connection=connection, target_metadata=target_metadata, version_table=version_table
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
