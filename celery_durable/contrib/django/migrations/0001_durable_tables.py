"""The durable tables: the library's own Alembic revisions, run on the store's database.
Alembic stays the single source of the schema; this migration only runs it, so a later
release upgrades the tables through ``manage.py migrate`` as well."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def upgrade_durable_tables(apps: Any, schema_editor: Any) -> None:
    from celery_durable.contrib.django.setup import durables  # noqa: PLC0415

    for durable in durables():
        durable.migrate()
        # Its connections would keep Django's test runner from dropping a test database.
        durable.store.dispose()


class Migration(migrations.Migration):
    # The revisions commit on the store's own connection, not in Django's transaction.
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.RunPython(
            upgrade_durable_tables, reverse_code=migrations.RunPython.noop, elidable=False
        )
    ]
