"""The README's "Operating it" walk-through: orders whose charge step has a bug in one
deploy and not in the next.

``ORDERS_BUG=1`` is the bad deploy: ``charge`` reads the card limit in the wrong unit and
refuses amounts over 2000. Run the worker with it, start some orders, then restart the
worker without it (the fix) and resume what failed::

    celery -A examples.orders durable migrate
    ORDERS_BUG=1 celery -A examples.orders worker
    python -c "from examples.orders import checkout; [checkout.delay(n) for n in range(1, 9)]"
    celery -A examples.orders durable list --status failed
    celery -A examples.orders durable resume --workflow examples.orders.checkout

Settings come from ``CELERY_DURABLE_*`` (``CELERY_DURABLE_DATABASE_URL`` names the store)
and ``CELERY_BROKER_URL``.
"""

from __future__ import annotations

import os

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

app = Celery("orders", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
durable = Durable(app)


# --8<-- [start:checkout]
@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1000 + 500 * (order_id % 4)}


@durable.step
def charge(order_id: int, amount: int) -> str:
    if os.environ.get("ORDERS_BUG") and amount > 2000:
        raise ValueError(f"amount {amount} is over the card limit of 2000")
    return f"receipt-{order_id}-{amount}"


@durable.step
def ship(order_id: int) -> str:
    return f"parcel-{order_id}"


@durable.workflow(max_attempts=2, retry_backoff=1.0)
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    receipt = charge(order_id, item["amount"])
    return {"receipt": receipt, "parcel": ship(order_id)}


# --8<-- [end:checkout]


@durable.workflow
def refund(order_id: int) -> str:
    """Waits for a person to approve it (signal ``approval``)."""
    decision = cd.wait_for_signal("approval")
    return f"refunded {order_id} ({decision})"
