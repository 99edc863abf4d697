"""The durable tables in the app's Django migrations: each runs the library's Alembic
revisions (the one source of the schema) on the store's database, up to the head of the
installed release.

``0001_durable_tables`` creates the tables; every release that adds an Alembic revision
adds a Django migration too (``0004_durable_tables_upgrade`` for ``0013``), so that
``manage.py migrate`` upgrades tables an older release made. Such a migration names in
``ALEMBIC_REVISION`` the head it was written for, and a unit test
(tests/unit/test_django_migrations.py) fails while the newest of them is behind the
Alembic head."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def upgrade_durable_tables(apps: Any, schema_editor: Any) -> None:
    """Every Durable's tables to the Alembic head (nothing to do when they are there)."""
    from celery_durable.contrib.django.setup import durables  # noqa: PLC0415

    for durable in durables():
        durable.migrate()
        # Its connections would keep Django's test runner from dropping a test database.
        durable.runtime.store.dispose()


def upgrade_tables() -> migrations.RunPython:
    """The operation of the app's migrations that upgrade the tables: not reversible
    (``migrate celery_durable zero`` drops nothing), and kept by squashmigrations."""
    return migrations.RunPython(
        upgrade_durable_tables, reverse_code=migrations.RunPython.noop, elidable=False
    )
