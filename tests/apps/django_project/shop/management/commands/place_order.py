"""``manage.py place_order [--fail] [--savepoint]``: what a view does, an order and its
checkout in one ``transaction.atomic()``; prints what happened as JSON."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from tests.apps.django_project.celery import checkout
from tests.apps.django_project.shop.models import Order


class Failed(Exception):
    pass


class Command(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--fail", action="store_true", help="raise after .delay()")
        parser.add_argument(
            "--rollback", action="store_true", help="mark the block for rollback, no error"
        )
        parser.add_argument(
            "--on-commit", action="store_true", help="delay_on_commit instead of delay"
        )
        parser.add_argument(
            "--savepoint", action="store_true", help="start a second run in a savepoint rolled back"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        out: dict[str, Any] = {}
        try:
            with transaction.atomic():
                order = Order.objects.create()
                out["order"] = order.pk
                if options["on_commit"]:
                    checkout.delay_on_commit(order.pk)  # None, as Celery's: no handle
                else:
                    out["run"] = checkout.delay(order.pk).id
                if options["savepoint"]:
                    try:
                        with transaction.atomic():
                            out["rolled_back_run"] = checkout.delay(-order.pk).id
                            raise Failed("the savepoint")
                    except Failed:
                        pass
                if options["rollback"]:
                    transaction.set_rollback(True)
                if options["fail"]:
                    raise Failed("after .delay()")
        except Failed:
            out["failed"] = True
        out["orders"] = list(Order.objects.values_list("pk", flat=True))
        self.stdout.write(json.dumps(out))
