"""The durable tables: the library's own Alembic revisions, run on the store's database.
Alembic stays the single source of the schema; this migration only runs it. Tables it
made under an older release are upgraded by the later ``*_durable_tables_upgrade``
migrations, one per release that adds a revision (see ``contrib.django.tables``)."""

from __future__ import annotations

from django.db import migrations

from celery_durable.contrib.django.tables import upgrade_tables


class Migration(migrations.Migration):
    # The revisions commit on the store's own connection, not in Django's transaction.
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [upgrade_tables()]
