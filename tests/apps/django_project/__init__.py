"""A Django project for the Django app's tests, driven through ``manage.py`` and real
workers in subprocesses (it configures Django, which the test process must not). Its
settings come from ``TEST_DJANGO_*`` variables (``tests/support/django.py`` sets them)."""

from tests.apps.django_project.celery import app as celery_app

__all__ = ["celery_app"]
