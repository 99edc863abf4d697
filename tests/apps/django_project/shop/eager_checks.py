"""Run by pytest with pytest-django in a subprocess (tests/integration/test_django.py): the
eager fixture, as the README's example uses it."""

from __future__ import annotations

from celery_durable import WorkflowStatus
from celery_durable.contrib.django.testing import durable_eager  # noqa: F401 - the fixture
from tests.apps.django_project.celery import approval
from tests.apps.django_project.shop.models import Order


def test_a_workflow_runs_eagerly_with_a_signal_a_timer_and_a_fan_out(durable_eager):  # noqa: F811
    order = Order.objects.create()
    handle = approval.delay(order.pk)
    assert handle.status() is WorkflowStatus.WAITING  # for the signal
    handle.signal("approved", {"by": "ann"})
    assert handle.status() is WorkflowStatus.WAITING  # for its hour
    assert durable_eager.clock.advance(3540) == 0  # a minute short of due, on a slow machine too
    assert durable_eager.clock.advance(60) == 1
    assert handle.get(timeout=10) == {
        "order": order.pk,
        "by": "ann",
        "doubled": [2, 4, 6],
        "paid": "paid",
    }
    assert Order.objects.get(pk=order.pk).status == "paid"
