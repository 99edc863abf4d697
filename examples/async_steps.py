"""An ``async def`` workflow with ``async def`` steps, on the embedded default.

Run it (no server needed)::

    python examples/async_steps.py

The body awaits its steps; ``asyncio.gather`` runs three of them at once in the worker
process, each recorded under the index its call took, so a replay returns each its own
result whatever order they finished in. A plain ``def`` step, awaited, runs off the loop
on a thread. The body API is awaited too: ``await cd.sleep(...)`` is a durable timer.
"""

from __future__ import annotations

import asyncio

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable

DATA = data_dir("ASYNC_DIR", driver=__name__ == "__main__")
app = Celery("async_steps", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:workflow]
@durable.step
async def fetch_price(sku: str) -> float:
    await asyncio.sleep(0.3)  # an HTTP call, say (httpx.AsyncClient)
    return {"apple": 0.5, "pear": 0.75, "fig": 1.25}[sku]


@durable.step
def tax_rate(country: str) -> float:  # a plain def step: blocking code
    return {"fr": 0.2, "de": 0.19}[country]


@durable.workflow
async def quote(skus: list[str], country: str) -> float:
    prices = await asyncio.gather(*(fetch_price(sku) for sku in skus))  # at once
    rate = await tax_rate(country)  # a plain def step runs off the event loop
    await cd.sleep(0.5)  # a durable timer: the run waits holding no worker
    return round(sum(prices) * (1 + rate), 2)


# --8<-- [end:workflow]


def main() -> None:
    durable.migrate()
    with worker("async_steps", "ASYNC_DIR", DATA, "-c", "1", "--loglevel=WARNING"):
        handle = quote.delay(["apple", "pear", "fig"], "fr")
        print("quote:", handle.get(timeout=60))
        steps = handle.steps()
        print("steps:", [(step.idx, step.name.rsplit(".", 1)[-1]) for step in steps])
        fetched = sorted(
            (step for step in steps if step.name.endswith("fetch_price")),
            key=lambda step: step.started_at or 0.0,
        )
        overlap = fetched[-1].started_at - fetched[0].started_at < 0.3  # type: ignore[operator]
        print("the three fetches overlapped:", overlap)


if __name__ == "__main__":
    main()
