"""The store's runs as a Django model, for the admin: unmanaged (Alembic owns the table;
``migrate`` never alters it) and read-only.

``Run.objects`` reads ``<table_prefix>runs`` on the database alias the store's URL came
from, and only the store's namespace. A store given its own
``CELERY_DURABLE_DATABASE_URL`` is on no Django alias: ``Run.objects`` then raises
ImproperlyConfigured, and the admin does not list runs at all.

The inputs and results are not fields: they are shown, redacted, on the dashboard.

Example::

    Run.objects.filter(status="FAILED", name="shop.checkout").count()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models

from celery_durable.contrib.django.database import from_django
from celery_durable.store import ALL_STATUSES


@dataclass(frozen=True)
class Bound:
    alias: str
    namespace: str
    table: str


_bound: list[Bound] = []
_bound_lock = threading.Lock()


def bound() -> Bound:
    """Where the project's store keeps its runs, read from its config once; the model's
    table is pointed there (the prefix is the store's setting, known only at run time)."""
    with _bound_lock:
        if not _bound:
            from celery_durable.contrib.django.setup import durable  # noqa: PLC0415

            config = durable().config
            alias = from_django(config)
            if alias is None:
                raise ImproperlyConfigured(
                    "celery_durable's store has a database URL of its own, not one from "
                    "DATABASES: its runs are on no Django database alias"
                )
            _bound.append(Bound(alias, config.namespace, f"{config.table_prefix}runs"))
            Run._meta.db_table = _bound[0].table
        return _bound[0]


class RunManager(models.Manager["Run"]):
    def get_queryset(self) -> models.QuerySet[Run]:
        where = bound()
        return super().get_queryset().using(where.alias).filter(namespace=where.namespace)


class Run(models.Model):
    namespace = models.CharField(max_length=200)
    id = models.CharField(primary_key=True, max_length=255)
    name = models.CharField("workflow", max_length=255)
    status = models.CharField(max_length=16, choices=[(s, s.lower()) for s in ALL_STATUSES])
    queue = models.CharField(max_length=255, null=True)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    wait_signal = models.CharField("waits for signal", max_length=255, null=True)
    error = models.TextField(null=True)
    cancel_requested = models.BooleanField()
    cancel_reason = models.TextField(null=True)
    created_at = models.FloatField()
    started_at = models.FloatField(null=True)
    finished_at = models.FloatField(null=True)
    updated_at = models.FloatField()
    parent_id = models.CharField("parent", max_length=255, null=True)
    forked_from = models.CharField(max_length=255, null=True)

    objects = RunManager()

    class Meta:
        managed = False
        db_table = "durable_runs"  # bound() points it at the store's prefix
        verbose_name = "workflow run"
        # view: read runs; change: act on them (cancel, resume, fork, signal).
        default_permissions = ("view", "change")
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return self.id

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("workflow runs are read-only here: use the operations (cancel, resume)")

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("workflow runs are deleted by `durable gc`, not through the ORM")
