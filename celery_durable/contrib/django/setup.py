"""The project's Durable instances, for ``migrate``, ``manage.py durable``, the dashboard
and the admin: those bound to Celery's current app (the one the project's ``celery.py``
makes), or, with none, one made from the Django settings alone (``CELERY_DURABLE_*``)."""

from __future__ import annotations

from celery import Celery, current_app

from celery_durable.durable import Durable, durables_of


def celery_app() -> Celery:
    return current_app._get_current_object()  # type: ignore[attr-defined,no-any-return]


def durables() -> list[Durable]:
    app = celery_app()
    found = durables_of(app)
    if found:
        return found
    from django.conf import settings  # noqa: PLC0415

    app.config_from_object(settings, namespace="CELERY")
    return [Durable(app)]


def durable() -> Durable:
    """The Durable the dashboard and the admin show: the first the project made (the one
    of the first namespace, when it made several)."""
    return durables()[0]
