"""A worker app with updates, on the same database and namespace as tests.apps.basic: a
cart that takes ``add_item`` requests (a validator refuses empty ones, the body rejects a
repeat), prices the cart in a step, then replies; and a run that ends without answering.
Steps note in Redis how often they ran (``updates:<key>:priced``) and can be held
(``block:<key>:priced``) so a test can kill the worker in the middle."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

import celery_durable as cd
from celery_durable import Durable

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("TEST_UPDATES_QUEUE", "updates")

app = Celery("updates", broker=os.environ.get("TEST_BROKER_URL", REDIS_URL))
app.conf.update(
    task_default_queue=QUEUE, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True
)
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic
_redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)


@durable.step
def priced(key: str, items: list[str]) -> int:
    """The cart's total; held while ``block:<key>:priced`` is set (at most two minutes)."""
    _redis.incr(f"updates:{key}:priced")
    _redis.set(f"started:{key}:priced", "1")
    deadline = time.monotonic() + 120
    while _redis.exists(f"block:{key}:priced") and time.monotonic() < deadline:
        time.sleep(0.02)
    return sum(len(sku) for sku in items)


@durable.workflow(name="tests.apps.updates.cart")
def cart(key: str, limit: int) -> dict[str, Any]:
    items: list[str] = []
    while len(items) < limit:
        req = cd.wait_for_update("add_item", timeout=300)
        if req is None:
            break
        if req.payload in items:
            req.reject(f"{req.payload} is in the cart already")
            continue
        items.append(req.payload)
        req.reply({"count": len(items), "total": priced(key, items)})
    return {"items": items}


@cart.validator("add_item")
def a_sku(sku: Any) -> None:
    if not isinstance(sku, str) or not sku:
        raise ValueError("a sku is a non-empty string")


@durable.workflow(name="tests.apps.updates.unanswered")
def unanswered(key: str) -> str:
    """Takes one request and ends without answering it."""
    req = cd.wait_for_update("ask")
    priced(key, [str(req.payload)])
    return "ended"
