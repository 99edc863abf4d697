"""``POST /orders/`` with ``{"item": "book", "quantity": 2}``: the order and its checkout
start in one transaction. The run is inserted on Django's connection and published when
the transaction commits, so a worker never sees a checkout of an order that isn't there,
and a rollback takes both away."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from orders.workflows import checkout

MAX_QUANTITY = 10


class TooMany(Exception):
    pass


# --8<-- [start:place-order]
# A JSON endpoint for curl and scripts: no browser session, so no CSRF cookie to check.
@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    try:
        body = json.loads(request.body or b"{}")
        item = str(body.get("item", "book"))
        quantity = int(body.get("quantity", 1))
    except (ValueError, TypeError, AttributeError):
        return JsonResponse({"error": 'send JSON: {"item": "book", "quantity": 1}'}, status=400)
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item, quantity=quantity)
            run = checkout.delay(order.pk)
            # Checked after .delay() on purpose, to show the rollback: the exception undoes
            # the order and the run, and no message reaches the broker.
            if quantity > MAX_QUANTITY:
                raise TooMany(f"at most {MAX_QUANTITY} per order")
    except TooMany as exc:
        return JsonResponse({"error": str(exc), "rolled_back_run": run.id}, status=409)
    return JsonResponse({"order": order.pk, "run": run.id}, status=201)
    # --8<-- [end:place-order]


@require_GET
def order_detail(request: HttpRequest, pk: int) -> JsonResponse:
    return JsonResponse(get_object_or_404(Order, pk=pk).as_json())
