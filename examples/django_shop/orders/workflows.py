"""The checkout: each step's result is stored, so a worker that dies mid-checkout resumes
after the last finished step instead of charging again."""

from __future__ import annotations

from shop.celery import durable

from orders.models import Order

PRICE_CENTS = 1250


@durable.step(max_attempts=5, backoff=1.0)
def charge(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    # A payment provider's call would go here; its receipt is what the step stores.
    return f"receipt-{order.pk}-{order.quantity * PRICE_CENTS}"


@durable.step
def mark_paid(order_id: int, receipt: str) -> str:
    Order.objects.filter(pk=order_id).update(status="paid", receipt=receipt)
    return "paid"


@durable.workflow(name="orders.checkout")
def checkout(order_id: int) -> dict[str, object]:
    receipt = charge(order_id)
    return {"order": order_id, "receipt": receipt, "status": mark_paid(order_id, receipt)}
