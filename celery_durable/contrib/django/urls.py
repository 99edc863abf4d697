"""The dashboard in the project's URLconf, behind Django's login, permissions and CSRF::

    urlpatterns = [path("durable/", include("celery_durable.contrib.django.urls")), ...]

Every page and action of the dashboard is under that prefix (``/durable/run/<id>``);
``reverse("celery_durable:dashboard", kwargs={"path": ""})`` is its runs page. Who may
open it: ``celery_durable.contrib.django.access``.
"""

from __future__ import annotations

from django.urls import re_path

from celery_durable.contrib.django import views

app_name = "celery_durable"
urlpatterns = [re_path(r"^(?P<path>.*)$", views.dashboard, name="dashboard")]
