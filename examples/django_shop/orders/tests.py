"""The shop's tests, with Django's runner: ``python manage.py test orders``.

Eager runs write through the store's own connections, which commit, so these are
``TransactionTestCase``s (``TestCase`` never commits). No worker and no broker is needed.
"""

from __future__ import annotations

import json

from django.test import TransactionTestCase
from shop.celery import durable

from celery_durable import WorkflowNotFound
from celery_durable.contrib.django.testing import eager_workflows
from orders.models import Order
from orders.workflows import checkout


class CheckoutTests(TransactionTestCase):
    def test_a_checkout_charges_and_marks_the_order_paid(self):
        order = Order.objects.create(item="book", quantity=2)
        with eager_workflows():  # in-process, on the test database
            handle = checkout.delay(order.pk)
            result = handle.get(timeout=10)
        receipt = f"receipt-{order.pk}-2500"
        self.assertEqual(result, {"order": order.pk, "receipt": receipt, "status": "paid"})
        order.refresh_from_db()
        self.assertEqual((order.status, order.receipt), ("paid", receipt))

    def test_a_refused_order_rolls_back_its_run_too(self):
        answer = self.client.post(
            "/orders/", json.dumps({"item": "book", "quantity": 20}), "application/json"
        )
        self.assertEqual(answer.status_code, 409)
        self.assertFalse(Order.objects.exists())
        with self.assertRaises(WorkflowNotFound):  # the run went with the view's transaction
            durable.get_handle(answer.json()["rolled_back_run"])
