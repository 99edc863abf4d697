"""The README's shop: a first deployment on Postgres and Redis (or RabbitMQ).

Save it as ``shop.py``, then::

    createdb -h 127.0.0.1 -U postgres shop
    export CELERY_DURABLE_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/shop
    celery -A shop durable migrate
    celery -A shop worker -E          # in one terminal
    python shop.py                    # in another: starts a run and waits for it

``CELERY_BROKER_URL`` names the broker (Redis on 127.0.0.1 by default). docker-compose.yml
runs it as ``celery -A examples.shop worker -E``.
"""

from __future__ import annotations

import os

from celery import Celery

from celery_durable import Durable

# --8<-- [start:app]
app = Celery("shop", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
durable = Durable(app)  # the store: CELERY_DURABLE_DATABASE_URL (or durable_database_url)


@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1999}  # your inventory call: runs once, result stored


@durable.step(max_attempts=5, backoff=0.5)
def charge(order_id: int, amount: int) -> str:
    return f"receipt-{order_id}-{amount}"  # your payment call: retried in-process, then stored


@durable.workflow
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    return {"receipt": charge(order_id, item["amount"])}
    # --8<-- [end:app]


# --8<-- [start:main]
if __name__ == "__main__":  # `python shop.py`; a worker or `celery -A shop` only imports it
    handle = checkout.delay(42)  # handle.id is the Celery task id too
    print(handle.get(timeout=30))  # {'receipt': 'receipt-42-1999'}
    print(durable.get_handle(handle.id).status())  # a handle from an id, in any process
    # --8<-- [end:main]
