"""Workflows in Celery's canvas, with a result backend, on the embedded default.

Run it (no server needed)::

    python examples/canvas.py

A workflow takes part in a chain, a group and a chord as a task does; its callbacks fire
when the run settles, and its state is in the result backend (here Celery's SQLAlchemy
backend on a SQLite file). An errback fires for a run that failed for good, and a
producer with none of the workflow code starts a run by name.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery, chain, chord, group
from celery.result import AsyncResult
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable

DATA = data_dir("CANVAS_DIR", driver=__name__ == "__main__")
TRANSPORT = file_broker(DATA)
RESULTS = f"db+sqlite:///{DATA}/results.sqlite3"  # Celery's SQLAlchemy result backend


app = Celery("canvas", broker="filesystem://localhost/", backend=RESULTS)
app.conf.broker_transport_options = TRANSPORT
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:tasks]
@app.task
def add(x: int, y: int) -> int:  # plain Celery tasks around the workflows
    return x + y


@app.task
def total(values: list[int]) -> int:
    return sum(values)


@app.task
def notify(amount: int) -> str:
    return f"notified: {amount}"


@app.task
def alert(request: Any, exc: BaseException, traceback: Any) -> None:
    (DATA / "alert.txt").write_text(f"{request.id} {exc!r}")  # a new-style errback


@durable.step
def charge(order_id: int) -> int:
    return 10 * order_id


@durable.workflow
def checkout(order_id: int) -> int:
    return charge(order_id)


@durable.workflow(max_attempts=1)
def fragile(order_id: int) -> int:
    raise ValueError(f"order {order_id} has no address")


@durable.workflow
def approval(order_id: int) -> str:
    decision = cd.wait_for_signal("decision")
    return f"order {order_id} {decision}"
    # --8<-- [end:tasks]


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} never happened")
        time.sleep(0.05)


# --8<-- [start:canvas]
def in_the_canvas() -> None:
    print("chain:", chain(add.s(2, 3), checkout.s(), notify.s()).apply_async().get(timeout=60))
    print("group:", group(checkout.s(n) for n in (1, 2, 3)).apply_async().get(timeout=60))
    print(
        "chord:",
        chord([checkout.s(n) for n in (1, 2, 3)], total.s()).apply_async().get(timeout=60),
    )

    failed = fragile.apply_async((7,), link_error=alert.s())
    wait_for((DATA / "alert.txt").exists, "the errback")
    run_id, error = (DATA / "alert.txt").read_text().split(" ", 1)
    print("errback:", "the run" if run_id == failed.id else run_id, error)
    # --8<-- [end:canvas]


# --8<-- [start:results]
def through_the_backend() -> None:
    pending = approval.delay(8)  # a WorkflowHandle, which is an AsyncResult
    wait_for(lambda: app.AsyncResult(pending.id).state == "WAITING", "WAITING")
    print("handle is an AsyncResult:", isinstance(pending, AsyncResult))
    print("backend says:", app.AsyncResult(pending.id).state, app.AsyncResult(pending.id).info)
    pending.signal("decision", "approved")
    print("backend result:", app.AsyncResult(pending.id).get(timeout=60))

    # A producer with no workflow code: the run is created by its first delivery.
    producer = Celery("producer", broker="filesystem://localhost/", backend=RESULTS)
    producer.conf.broker_transport_options = TRANSPORT
    producer.send_task(checkout.name, args=[9], task_id="order-9")
    print("by name:", producer.AsyncResult("order-9").get(timeout=60))
    print("in the store:", durable.get_handle("order-9").status())
    # --8<-- [end:results]


def main() -> None:
    durable.migrate()
    with worker("canvas", "CANVAS_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        in_the_canvas()
        through_the_backend()


if __name__ == "__main__":
    main()
