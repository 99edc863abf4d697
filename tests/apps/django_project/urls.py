"""The admin, a login page for every user (the admin's own takes staff only), and the
dashboard mounted at ``/durable/``."""

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(template_name="admin/login.html")),
    path("durable/", include("celery_durable.contrib.django.urls")),
]
