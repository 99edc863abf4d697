"""Settings of the test project: Postgres (``TEST_DJANGO_DB=postgres``, the database
``TEST_DJANGO_PG_NAME``) or SQLite (a file), and no database URL for celery_durable. The
admin, and the dashboard at ``/durable/`` (``urls.py``), behind Django's login at
``/accounts/login/``; ``TEST_DJANGO_DASHBOARD_PERMISSION`` names the permission it needs
(unset: staff), ``TEST_DJANGO_DASHBOARD_READ_ONLY=1`` makes it read-only."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "celery_durable.contrib.django",
    "tests.apps.django_project.shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.apps.django_project.urls"
LOGIN_URL = "/accounts/login/"
STATIC_URL = "/static/"  # the admin's; served by `runserver --insecure` in the tests
CELERY_DURABLE_DASHBOARD_PERMISSION = os.environ.get("TEST_DJANGO_DASHBOARD_PERMISSION") or None
CELERY_DURABLE_DASHBOARD_READ_ONLY = os.environ.get("TEST_DJANGO_DASHBOARD_READ_ONLY") == "1"
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
            # Django's runner would test on an in-memory database, which workers can't share.
            "TEST": {"NAME": os.environ["TEST_DJANGO_SQLITE_PATH"] + ".test"},
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
