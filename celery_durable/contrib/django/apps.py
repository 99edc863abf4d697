"""The Django app: on ``ready`` it lets the store find its database in ``DATABASES`` and
its starts join Django's transactions."""

from __future__ import annotations

from django.apps import AppConfig


class CeleryDurableConfig(AppConfig):
    name = "celery_durable.contrib.django"
    label = "celery_durable"
    verbose_name = "Durable workflows"

    def ready(self) -> None:
        from celery_durable.contrib.django import database, transactions  # noqa: PLC0415

        database.install()
        transactions.install()
