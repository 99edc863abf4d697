"""A subscription that bills every period for as long as it lives: continue_as_new keeps
its history short, patched() lets a deploy change its code while it runs, and a step's
compensation refunds a charge when a later step fails for good. On the embedded default.

Run it (no server needed)::

    python examples/subscription.py

Two versions of the code live in this file; ``SUBSCRIPTION_CODE`` (v1, v2) picks the one a
worker runs, as a deploy would. v2 adds tax, guarded by ``cd.patched("tax")``.
"""

from __future__ import annotations

import os
import subprocess
import time

from celery import Celery
from scratch import data_dir, file_broker, spawn_worker, stop_workers

import celery_durable as cd
from celery_durable import Durable, PermanentError, WorkflowFailed

DATA = data_dir("SUBSCRIPTION_DIR", driver=__name__ == "__main__")
CODE = os.environ.get("SUBSCRIPTION_CODE", "v1")

app = Celery("subscription", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:steps]
@durable.step
def price(customer: str, period: int) -> int:
    return 1000


@durable.step
def price_with_tax(customer: str, period: int) -> int:
    return 1200


def refund(customer: str, period: int, amount: int, result: str) -> None:
    print(f"refunded {result} ({amount}) to {customer}", flush=True)


@durable.step(compensate=refund)
def charge(customer: str, period: int, amount: int) -> str:
    return f"charge-{customer}-{period}"


@durable.step
def deliver(customer: str, period: int) -> None:
    if customer == "mallory":
        raise PermanentError("no delivery address")


# --8<-- [end:steps]


# --8<-- [start:workflow]
@durable.workflow
def subscription(customer: str, period: int = 1, paid: int = 0) -> dict:
    if CODE == "v2" and cd.patched("tax"):  # v2: runs past this point before the deploy
        amount = price_with_tax(customer, period)  # get False and keep the old price
    else:
        amount = price(customer, period)
    receipt = charge(customer, period, amount)
    deliver(customer, period)  # fails for good -> refund(...), then the run is FAILED
    paid += amount
    cd.set_state({"period": period, "paid": paid, "last": receipt})
    if cd.wait_for_signal("renew") == "stop":  # the billing period
        return {"periods": period, "paid": paid}
    cd.continue_as_new(customer, period + 1, paid)  # same id, fresh history


# --8<-- [end:workflow]


def start_worker(code: str) -> subprocess.Popen[bytes]:
    options = ["-c", "2", "--loglevel=WARNING"]
    env = {"SUBSCRIPTION_CODE": code}
    return spawn_worker("subscription", "SUBSCRIPTION_DIR", DATA, *options, env=env)


def wait_for(what: str, condition: object) -> None:
    deadline = time.monotonic() + 60
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


# --8<-- [start:driver]
def demo(workers: list[subprocess.Popen[bytes]]) -> None:
    alice = subscription.apply_async(("alice",), run_id="sub-alice")
    wait_for("period 1", lambda: alice.status() is cd.WorkflowStatus.WAITING)
    print(f"period 1 on v1: {alice.query()}")
    workers[0].terminate()  # the deploy: v1 stops while alice's run is in flight
    workers[0].wait(30)
    workers.append(start_worker("v2"))
    for payload in ("renew", "renew", "stop"):  # kept until each period waits for one
        alice.signal("renew", payload)
    print(f"alice: {alice.get(timeout=60)}")
    record = alice.record()
    print(f"generation {record.generation}, continued from {record.continued_from}")
    mallory = subscription.apply_async(("mallory",), run_id="sub-mallory")
    try:
        mallory.get(timeout=60)
    except WorkflowFailed as exc:
        print(f"mallory failed: {exc.error_message}")
    ran = [(c.step.rsplit(".", 1)[-1], c.status) for c in mallory.compensations()]
    print(f"mallory: {mallory.record().compensation}, compensations {ran}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    workers = [start_worker("v1")]
    try:
        demo(workers)
    finally:
        stop_workers(workers[-1])


if __name__ == "__main__":
    main()
