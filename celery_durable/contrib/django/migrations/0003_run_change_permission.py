"""``celery_durable.change_run``: the permission to act on runs (cancel, resume, fork,
signal); ``view_run`` alone only reads them."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("celery_durable", "0002_run")]
    operations = [
        migrations.AlterModelOptions(
            name="run",
            options={
                "default_permissions": ("view", "change"),
                "managed": False,
                "ordering": ("-created_at", "-id"),
                "verbose_name": "workflow run",
            },
        )
    ]
