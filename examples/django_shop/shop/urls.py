"""``POST /orders/`` places an order, ``GET /orders/<id>/`` shows it, ``/durable/`` is the
dashboard of the runs, ``/admin/`` has them too."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from orders import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("orders/", views.place_order, name="place-order"),
    path("orders/<int:pk>/", views.order_detail, name="order-detail"),
    # For holders of celery_durable.view_run (change_run to act), behind Django's login
    # and CSRF check; a superuser (python manage.py createsuperuser) holds both.
    path("durable/", include("celery_durable.contrib.django.urls")),
    path("admin/", admin.site.urls),
]
