"""Steps and retries, on the embedded default.

Run it (no server needed)::

    python examples/steps.py

An order runs five steps: one retried in-process until a flaky service answers, one
deferred (its record rides on the next write), one that checks the card, a charge that
uses the run id as its idempotency key, and a shipment that fails the run's first
attempt, so the workflow retries from the database and replays the steps it recorded.
A second order's card check raises PermanentError: the run fails at once, not retried.
"""

from __future__ import annotations

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, PermanentError, WorkflowFailed

DATA = data_dir("STEPS_DIR", driver=__name__ == "__main__")
EFFECTS = DATA / "effects.log"

app = Celery("steps", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


def did(what: str) -> int:
    """Log a side effect; return how many times it has happened so far."""
    with EFFECTS.open("a") as log:
        log.write(what + "\n")
    return EFFECTS.read_text().splitlines().count(what)


# --8<-- [start:steps]
@durable.step(max_attempts=4, backoff=0.1, retry_on=(ConnectionError,))
def fetch_rate(order_id: str) -> float:
    if did(f"fetch_rate {order_id}") < 3:  # the first two calls time out
        raise ConnectionError("rate service timed out")
    return 1.1


@durable.step(commit="deferred")  # a pure computation: no commit of its own
def to_cents(amount: float, rate: float) -> int:
    return round(amount * rate * 100)


@durable.step
def check_card(card: str) -> None:
    if card == "expired":
        raise PermanentError("card expired")  # retrying can't help: fail the run now


@durable.step
def charge(order_id: str, cents: int) -> str:
    key = cd.WorkflowContext.current().run_id  # the same on every attempt
    did(f"charge {order_id}")
    return f"charged {cents} (idempotency key {key})"


@durable.step
def ship(order_id: str) -> str:
    if did(f"ship {order_id}") == 1:  # fails the run's first attempt
        raise OSError("label printer offline")
    return f"parcel-{order_id}"


@durable.workflow(max_attempts=3, retry_backoff=0.2)
def order(order_id: str, card: str) -> dict:
    rate = fetch_rate(order_id)
    cents = to_cents(12.5, rate)
    check_card(card)
    receipt = charge(order_id, cents)
    return {"receipt": receipt, "parcel": ship(order_id)}


# --8<-- [end:steps]


# --8<-- [start:driver]
def demo() -> None:
    first = order.apply_async(("o-1", "visa"), run_id="order-o-1")
    print(f"o-1 result: {first.get(timeout=60)}")
    effects = EFFECTS.read_text().split("\n")
    ran = {step: effects.count(f"{step} o-1") for step in ("fetch_rate", "charge", "ship")}
    print(f"o-1 calls: {ran}; run attempts: {first.record().attempts}")
    steps = [(s.idx, s.name.rsplit(".", 1)[-1], s.status, s.attempt) for s in first.steps()]
    print(f"o-1 steps: {steps}")
    second = order.apply_async(("o-2", "expired"), run_id="order-o-2")
    try:
        second.get(timeout=60)
    except WorkflowFailed as exc:
        print(f"o-2 failed: {exc.error_type}: {exc.error_message}")
    record = second.record()
    print(f"o-2 attempts: {record.attempts} of {record.max_attempts}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    with worker("steps", "STEPS_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        demo()


if __name__ == "__main__":
    main()
