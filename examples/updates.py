"""Updates: a request to a running workflow that gets an answer, on the embedded default.

Run it (no server needed)::

    python examples/updates.py

A cart waits for ``add_item`` requests without holding a worker. Each request gets the
cart's new total; a validator refuses an empty item before anything is recorded, the body
rejects an item already in the cart, and a ``checkout`` request ends the run.
"""

from __future__ import annotations

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, UpdateRejected

DATA = data_dir("UPDATES_DIR", driver=__name__ == "__main__")

app = Celery("updates", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)

PRICES = {"apple": 3, "pear": 4, "fig": 7}


# --8<-- [start:workflow]
@durable.step
def price_of(sku: str) -> int:
    return PRICES[sku]


@durable.workflow
def cart(cart_id: str) -> dict:
    items: list[str] = []
    total = 0
    while True:
        req = cd.wait_for_update("add_item", timeout=3600)  # the request, or None
        if req is None or req.payload == "checkout":
            if req is not None:
                req.reply({"items": items, "total": total})
            return {"items": items, "total": total}
        if req.payload in items:
            req.reject(f"{req.payload} is in the cart already")  # a step: recorded
            continue
        total += price_of(req.payload)
        items.append(req.payload)
        req.reply({"items": items, "total": total})  # stored before the caller sees it


@cart.validator("add_item")
def known_item(sku: object) -> None:
    # Runs in the worker before anything is recorded: a refusal leaves no step.
    if sku != "checkout" and sku not in PRICES:
        raise ValueError(f"we don't sell {sku!r}")


# --8<-- [end:workflow]


# --8<-- [start:driver]
def demo() -> None:
    # Update-with-start: start the run under a known id (or find it), then send updates.
    handle = cart.apply_async(("c-1",), run_id="cart-c-1", if_exists="return")
    print("apple:", handle.update("add_item", "apple", timeout=60))
    print("pear:", handle.update("add_item", "pear", timeout=60, idempotency_key="c-1-pear"))
    # The same key again: the first request's answer, nothing sent twice.
    print("pear again:", handle.update("add_item", "pear", timeout=60, idempotency_key="c-1-pear"))
    for sku in ("pear", "kiwi"):
        try:
            handle.update("add_item", sku, timeout=60)
        except UpdateRejected as exc:
            print(f"{sku}: rejected: {exc.reason}")
    print("checkout:", handle.update("add_item", "checkout", timeout=60))
    print("result:", handle.get(timeout=60))
    print("steps:", [s.name.rsplit(":", 1)[0].rsplit(".", 1)[-1] for s in handle.steps()])


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    with worker("updates", "UPDATES_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        demo()


if __name__ == "__main__":
    main()
