"""The shop project. Its Celery app loads with Django, so ``manage.py durable`` and the
views find the same ``Durable`` the worker runs."""

from shop.celery import app as celery_app

__all__ = ["celery_app"]
