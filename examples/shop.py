"""The README's shop, for docker-compose: ``celery -A examples.shop worker -E``."""

from __future__ import annotations

import os

from celery import Celery

from celery_durable import Durable

app = Celery("shop", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
durable = Durable(app)  # CELERY_DURABLE_DATABASE_URL names the store


@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1999}


@durable.step(max_attempts=5, backoff=0.5)
def charge(order_id: int, amount: int) -> str:
    return f"receipt-{order_id}-{amount}"


@durable.workflow
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    return {"receipt": charge(order_id, item["amount"])}
