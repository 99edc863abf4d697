"""The project's Celery app and its ``Durable``: ``celery -A shop worker -l info``.

Every ``CELERY_*`` Django setting configures Celery, and ``CELERY_DURABLE_*`` configures
celery_durable; with no ``CELERY_DURABLE_DATABASE_URL`` its store is ``DATABASES["default"]``.
"""

from __future__ import annotations

import os

from celery import Celery

from celery_durable import Durable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
durable = Durable(app)
# The workflows live in each app's workflows.py; the worker imports them at start.
app.autodiscover_tasks(related_name="workflows")
