"""Run by Django's own test runner (``manage.py test tests.apps.django_project.shop``, from
tests/integration/test_django.py): a start inside ``TestCase``, whose transaction never
commits."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.test import TestCase
from kombu import Connection

from tests.apps.django_project.celery import checkout
from tests.apps.django_project.shop.models import Order


def messages_waiting() -> int:
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=5) as conn:
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        try:
            return int(conn.default_channel.queue_declare(queue, passive=True).message_count)
        except Exception:  # noqa: BLE001 - not declared yet: nothing published
            return 0


class StartInATestCase(TestCase):
    def test_the_run_is_in_the_tests_transaction_and_published_by_its_captured_commit(self):
        order = Order.objects.create()
        with self.captureOnCommitCallbacks(execute=False) as held:
            handle = checkout.delay(order.pk)
        table = connection.ops.quote_name(f"{settings.CELERY_DURABLE_TABLE_PREFIX}runs")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT status FROM {table} WHERE id = %s", [handle.id])
            self.assertEqual(cursor.fetchone(), ("PENDING",))
        self.assertEqual(len(held), 1)  # the publish, held until a commit that never comes
        self.assertEqual(messages_waiting(), 0)
        with self.captureOnCommitCallbacks(execute=True):
            checkout.delay(order.pk)
        self.assertEqual(messages_waiting(), 1)
