"""The durable tables to Alembic revision 0015 (``updates``) in projects migrated before
it: the library's revisions again, on the store's database (nothing to do where
``0001_durable_tables`` just made them at the head)."""

from __future__ import annotations

from django.db import migrations

from celery_durable.contrib.django.tables import upgrade_tables

# The Alembic head this migration was written for (tests/unit/test_django_migrations.py).
ALEMBIC_REVISION = "0015"


class Migration(migrations.Migration):
    # The revisions commit on the store's own connection, not in Django's transaction.
    atomic = False
    dependencies = [("celery_durable", "0005_durable_tables_streams")]
    operations = [upgrade_tables()]
