"""The usual Django + Celery module, plus ``Durable(app)``: a checkout that marks its order
paid through the ORM."""

from __future__ import annotations

import os

from celery import Celery

from celery_durable import Durable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.django_project.settings")

app = Celery("django_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
durable = Durable(app)


@durable.step
def mark_paid(order_id: int) -> str:
    from tests.apps.django_project.shop.models import Order  # noqa: PLC0415 - apps ready

    Order.objects.filter(pk=order_id).update(status="paid")
    return "paid"


@durable.workflow(name="django_project.checkout")
def checkout(order_id: int) -> dict[str, object]:
    return {"order": order_id, "status": mark_paid(order_id)}


@durable.step
def double(n: int) -> int:
    return 2 * n


@durable.workflow(name="django_project.approval")
def approval(order_id: int) -> dict[str, object]:
    """Waits for a signal, then an hour, then fans out: the eager fixture's test."""
    import celery_durable as cd  # noqa: PLC0415 - the body's API, as users write it

    decision = cd.wait_for_signal("approved")
    cd.sleep(3600)
    doubled = cd.map(double, [1, 2, 3])
    return {
        "order": order_id,
        "by": decision["by"],
        "doubled": doubled,
        "paid": mark_paid(order_id),
    }
