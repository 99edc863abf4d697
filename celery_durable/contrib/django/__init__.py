"""celery_durable inside a Django project: add ``"celery_durable.contrib.django"`` to
``INSTALLED_APPS``.

- With no ``CELERY_DURABLE_DATABASE_URL``, the store uses ``DATABASES["default"]`` (or the
  alias ``CELERY_DURABLE_DATABASE`` names): ``database``.
- Inside ``transaction.atomic()`` on that alias, a start inserts the run on Django's own
  connection and publishes it from ``transaction.on_commit``: ``transactions``.
- ``manage.py migrate`` creates and upgrades the durable tables: the app's Django
  migrations run the library's Alembic revisions, ``0001`` to create them and one more for
  each release that adds a revision (``tables``). ``manage.py durable ...`` is
  ``celery -A app durable ...``.
- ``path("durable/", include("celery_durable.contrib.django.urls"))`` serves the dashboard
  behind Django's login, permission (``access``) and CSRF: ``views``.
- The runs are in the admin, read-only, with cancel and resume actions: ``admin``.
"""
