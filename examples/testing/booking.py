"""The workflows under test (examples/testing/test_booking.py): a booking waits up to an
hour for an approval signal, then keeps a day's grace before it charges.

``CELERY_DURABLE_DATABASE_URL`` names the store, ``CELERY_BROKER_URL`` the broker and
``BOOKING_QUEUE`` the queue, as in production. test_booking.py runs the workflows eagerly,
with no broker and no worker; test_booking_worker.py on a real worker.
"""

from __future__ import annotations

import os

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

app = Celery("booking", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.task_default_queue = os.environ.get("BOOKING_QUEUE", "booking")
durable = Durable(app)

RELEASED: list[str] = []  # what release() let go, for the tests to look at


@durable.step
def reserve(booking_id: str) -> str:
    return f"hold-{booking_id}"


@durable.step
def release(hold: str) -> None:
    RELEASED.append(hold)


@durable.step
def charge(booking_id: str) -> str:
    return f"receipt-{booking_id}"


@durable.workflow
def booking(booking_id: str) -> dict[str, str]:
    hold = reserve(booking_id)
    decision = cd.wait_for_signal("approval", timeout=3600)  # the payload, or None
    if decision is None:
        release(hold)
        return {"status": "expired"}
    cd.sleep(86400)  # a day's grace to change one's mind: a durable timer
    return {"status": "confirmed", "by": decision["by"], "receipt": charge(booking_id)}
