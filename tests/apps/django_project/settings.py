"""Settings of the test project: Postgres (``TEST_DJANGO_DB=postgres``, the database
``TEST_DJANGO_PG_NAME``) or SQLite (a file), and no database URL for celery_durable."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "celery_durable.contrib.django",
    "tests.apps.django_project.shop",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("TEST_DJANGO_DB", "postgres") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("TEST_DJANGO_PG_NAME", "test"),
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "USER": "postgres",
            "OPTIONS": {"connect_timeout": 10},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["TEST_DJANGO_SQLITE_PATH"],
        }
    }
if os.environ.get("TEST_DJANGO_OTHER_ENGINE"):
    DATABASES["other"] = {"ENGINE": os.environ["TEST_DJANGO_OTHER_ENGINE"], "NAME": "x"}

CELERY_BROKER_URL = os.environ["TEST_DJANGO_BROKER_URL"]
CELERY_TASK_DEFAULT_QUEUE = os.environ["TEST_DJANGO_QUEUE"]
CELERY_DURABLE_NAMESPACE = os.environ["TEST_DJANGO_NAMESPACE"]
CELERY_DURABLE_TABLE_PREFIX = os.environ["TEST_DJANGO_PREFIX"]
CELERY_DURABLE_DATABASE = os.environ.get("TEST_DJANGO_ALIAS", "default")
CELERY_DURABLE_POLL_INTERVAL = 0.2
CELERY_DURABLE_LOCK_TIMEOUT = 3
CELERY_DURABLE_DISPATCH_GRACE = 2
