"""``POST /orders/`` places an order, ``GET /orders/<id>/`` shows it, ``/durable/`` is the
dashboard of the runs."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path
from orders import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("orders/", views.place_order, name="place-order"),
    path("orders/<int:pk>/", views.order_detail, name="order-detail"),
]

try:
    import celery_durable.contrib.django.urls  # noqa: F401
except ImportError:
    # A celery_durable without the Django dashboard: the shop works without it.
    pass
else:
    urlpatterns.append(path("durable/", include("celery_durable.contrib.django.urls")))
