"""Signals, queries, durable timers and cancellation, on the embedded default.

Run it (no server needed)::

    python examples/approval.py

A booking waits for an approval signal without holding a worker, publishes its stage for
queries, sleeps on a durable timer, then charges. A second booking is cancelled while it
waits.
"""

from __future__ import annotations

import time

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, WorkflowCancelled

DATA = data_dir("APPROVAL_DIR", driver=__name__ == "__main__")

app = Celery("approval", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:workflow]
@durable.step
def reserve(booking_id: str) -> str:
    return f"hold-{booking_id}"


@durable.step
def release(hold: str) -> None:
    print(f"released {hold}", flush=True)


@durable.step
def charge(booking_id: str) -> str:
    return f"receipt-{booking_id}"


@durable.workflow
def booking(booking_id: str) -> dict:
    hold = reserve(booking_id)
    cd.set_state({"stage": "awaiting approval"})
    decision = cd.wait_for_signal("approval", timeout=3600)  # the payload, or None
    if decision is None:
        release(hold)
        return {"status": "expired"}
    cd.set_state({"stage": "approved", "by": decision["by"]})
    cd.sleep(1)  # a durable timer: no worker is held while it runs
    return {"status": "confirmed", "receipt": charge(booking_id)}


# --8<-- [end:workflow]


def wait_status(handle: cd.WorkflowHandle, status: cd.WorkflowStatus) -> None:
    deadline = time.monotonic() + 60
    while handle.status() is not status:
        if time.monotonic() > deadline:
            raise SystemExit(f"{handle.id} never reached {status}")
        time.sleep(0.05)


# --8<-- [start:driver]
def demo() -> None:
    first, second = booking.delay("b-1"), booking.delay("b-2")
    wait_status(first, cd.WorkflowStatus.WAITING)
    print(f"b-1 is {first.status()}; query: {first.query()}")
    first.signal("approval", {"by": "alice"}, idempotency_key="approve-b-1")
    print(f"b-1 result: {first.get(timeout=60)}; query: {first.query()}")
    wait_status(second, cd.WorkflowStatus.WAITING)
    second.cancel(reason="customer left")
    try:
        second.get(timeout=10)
    except WorkflowCancelled as exc:
        print(f"b-2 cancelled: {exc.reason}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    with worker("approval", "APPROVAL_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        demo()


if __name__ == "__main__":
    main()
