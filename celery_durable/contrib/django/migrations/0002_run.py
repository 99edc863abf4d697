"""The runs table as an unmanaged model (the admin's): Django records it and its
permission, and creates or alters nothing (the table is the library's Alembic revisions')."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("celery_durable", "0001_durable_tables")]
    operations = [
        migrations.CreateModel(
            name="Run",
            fields=[
                ("namespace", models.CharField(max_length=200)),
                ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=255, verbose_name="workflow")),
                ("status", models.CharField(max_length=16)),
                ("queue", models.CharField(max_length=255, null=True)),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                (
                    "wait_signal",
                    models.CharField(max_length=255, null=True, verbose_name="waits for signal"),
                ),
                ("error", models.TextField(null=True)),
                ("cancel_requested", models.BooleanField()),
                ("cancel_reason", models.TextField(null=True)),
                ("created_at", models.FloatField()),
                ("started_at", models.FloatField(null=True)),
                ("finished_at", models.FloatField(null=True)),
                ("updated_at", models.FloatField()),
                ("parent_id", models.CharField(max_length=255, null=True, verbose_name="parent")),
                ("forked_from", models.CharField(max_length=255, null=True)),
            ],
            options={
                "verbose_name": "workflow run",
                "db_table": "durable_runs",
                "ordering": ("-created_at", "-id"),
                "managed": False,
                "default_permissions": ("view",),
            },
        )
    ]
