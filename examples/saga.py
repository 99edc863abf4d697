"""A saga, on the embedded default: each booking step names what undoes it.

Run it (no server needed)::

    python examples/saga.py

A trip books a flight and a hotel, then charges. A declined charge rolls the bookings back
from the body with ``cd.compensate()``; a trip cancelled while it waits for the
traveller's confirmation is rolled back by the cancel; a confirmed trip keeps both.
"""

from __future__ import annotations

import time

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, WorkflowCancelled

DATA = data_dir("SAGA_DIR", driver=__name__ == "__main__")
EFFECTS = DATA / "effects.log"

app = Celery("saga", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


def did(what: str) -> None:
    with EFFECTS.open("a") as log:
        log.write(what + "\n")


# --8<-- [start:saga]
@durable.step(max_attempts=3, backoff=0.1)  # a compensation that is a step retries
def cancel_flight(trip_id: str, result: str) -> None:
    did(f"cancelled {result}")


def cancel_hotel(trip_id: str, result: str) -> None:  # a plain function: one attempt
    did(f"cancelled {result}")


@durable.step(compensate=cancel_flight)
def book_flight(trip_id: str) -> str:
    return f"flight-{trip_id}"


@durable.step(compensate=cancel_hotel)
def book_hotel(trip_id: str) -> str:
    return f"hotel-{trip_id}"


@durable.step
def pay(trip_id: str) -> bool:
    return trip_id != "t-1"  # t-1's card is declined


@durable.workflow
def trip(trip_id: str) -> dict:
    flight = book_flight(trip_id)
    hotel = book_hotel(trip_id)
    if not pay(trip_id):
        undone = cd.compensate()  # now, latest first: the hotel, then the flight
        return {"status": "declined", "undone": [c.step.rsplit(".", 1)[-1] for c in undone]}
    cd.wait_for_signal("confirm")  # a cancel while it waits rolls the bookings back
    return {"status": "booked", "flight": flight, "hotel": hotel}


# --8<-- [end:saga]


def wait_status(handle: cd.WorkflowHandle, status: cd.WorkflowStatus) -> None:
    deadline = time.monotonic() + 60
    while handle.status() is not status:
        if time.monotonic() > deadline:
            raise SystemExit(f"{handle.id} never reached {status}")
        time.sleep(0.05)


# --8<-- [start:driver]
def demo() -> None:
    declined = trip.apply_async(("t-1",), run_id="trip-t-1")
    print(f"t-1: {declined.get(timeout=60)}")
    cancelled = trip.apply_async(("t-2",), run_id="trip-t-2")
    wait_status(cancelled, cd.WorkflowStatus.WAITING)
    cancelled.cancel(reason="traveller changed plans")
    try:
        cancelled.get(timeout=60)
    except WorkflowCancelled as exc:
        print(f"t-2 cancelled: {exc.reason}; {cancelled.record().compensation}")
    ran = [(c.step.rsplit(".", 1)[-1], c.index, c.status) for c in cancelled.compensations()]
    print(f"t-2 compensations: {ran}")
    booked = trip.apply_async(("t-3",), run_id="trip-t-3")
    booked.signal("confirm")
    print(f"t-3: {booked.get(timeout=60)}; compensations: {booked.compensations()}")
    print(f"undone: {EFFECTS.read_text().splitlines()}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    with worker("saga", "SAGA_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        demo()


if __name__ == "__main__":
    main()
