"""Settings of the example shop. SQLite (``db.sqlite3`` next to manage.py) unless
``SHOP_DATABASE=postgres``; the broker is ``CELERY_BROKER_URL`` (default: local Redis)."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# An example's key: set DJANGO_SECRET_KEY for anything but a local try-out.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-shop-example-only")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --8<-- [start:apps]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Its migration creates the durable tables; it adds `manage.py durable ...`, the
    # dashboard (shop/urls.py) and the runs in the admin.
    "celery_durable.contrib.django",
    "orders",
]
# --8<-- [end:apps]
# The dashboard and the admin need sessions, users and Django's CSRF check.
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
LOGIN_URL = "/admin/login/"  # where the dashboard sends a visitor who isn't logged in
STATIC_URL = "/static/"
ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
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

# --8<-- [start:databases]
if os.environ.get("SHOP_DATABASE", "sqlite") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("SHOP_PG_NAME", "django_shop"),
            "HOST": os.environ.get("SHOP_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("SHOP_PG_PORT", "5432"),
            "USER": os.environ.get("SHOP_PG_USER", "postgres"),
            "PASSWORD": os.environ.get("SHOP_PG_PASSWORD", ""),
        }
    }
else:
    # The web server and the worker are separate processes: a file both open, not :memory:.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "db.sqlite3",
            # Django's runner tests SQLite in memory, which the store refuses: a file.
            "TEST": {"NAME": BASE_DIR / "test_db.sqlite3"},
        }
    }

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# A queue of the shop's own, so other projects on the same broker don't take its tasks.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SHOP_QUEUE", "django_shop")
# --8<-- [end:databases]
