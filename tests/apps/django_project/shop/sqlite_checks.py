"""Run by Django's own test runner on the project's SQLite database
(``manage.py test tests.apps.django_project.shop.sqlite_checks``, from
tests/integration/test_django.py): the store inside ``TestCase``'s transaction, which holds
the SQLite file for the whole test."""

from __future__ import annotations

from django.test import TestCase

from celery_durable import WorkflowStatus
from tests.apps.django_project.celery import app, checkout, durable
from tests.apps.django_project.shop.models import Order


class StoreInATestCaseOnSQLite(TestCase):
    def test_a_run_started_in_the_test_is_read_and_cancelled_through_the_store(self):
        order = Order.objects.create()  # the test's transaction now holds the file
        with self.captureOnCommitCallbacks(execute=False):
            handle = checkout.delay(order.pk)
        self.assertIs(handle.status(), WorkflowStatus.PENDING)
        self.assertEqual(durable.get_handle(handle.id).record().name, "django_project.checkout")
        self.assertIs(handle.cancel("test over"), WorkflowStatus.CANCELLED)
        self.assertEqual(handle.record().cancel_reason, "test over")

    def test_an_eager_run_completes_inside_the_test(self):
        order = Order.objects.create()
        app.conf.task_always_eager = True
        try:
            with self.captureOnCommitCallbacks(execute=True):
                handle = checkout.delay(order.pk)
            self.assertEqual(handle.get(timeout=10), {"order": order.pk, "status": "paid"})
        finally:
            app.conf.task_always_eager = False
        self.assertEqual(Order.objects.get(pk=order.pk).status, "paid")
