"""Parallel steps, a routed step and a child workflow, on the embedded default.

Run it (no server needed)::

    python examples/fanout.py

It starts two real workers, one on the default queue and one only on "gpu", then runs a
report: a fan-out of one render task per page (on "gpu", results in input order), two
fetches started as futures and gathered, a routed step called directly, and a child
workflow whose id derives from the parent's. While the report waits it holds no worker.
"""

from __future__ import annotations

import os
import subprocess

from celery import Celery
from scratch import data_dir, file_broker, spawn_worker, stop_workers

import celery_durable as cd
from celery_durable import Durable

DATA = data_dir("FANOUT_DIR", driver=__name__ == "__main__")

app = Celery("fanout", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:workflow]
@durable.step
def split(doc_id: str) -> list[int]:
    return [1, 2, 3, 4, 5]


@durable.step(queue="gpu", max_attempts=3)
def render(page: int) -> str:
    """A routed step: always its own Celery task, on the "gpu" queue."""
    return f"page-{page}.png by {os.environ.get('FANOUT_WORKER', '?')}"


@durable.step
def fetch(source: str) -> dict:
    return {"source": source, "bytes": 100 * len(source)}


@durable.workflow
def ship(doc_id: str) -> str:
    return f"shipped {doc_id}"


@durable.workflow
def report(doc_id: str) -> dict:
    pages = split(doc_id)  # a local step, as always
    images = cd.map(render, pages)  # one task per page, results in input order
    a, b = cd.gather(fetch.start("a"), fetch.start("bb"))  # futures, gathered
    cover = render(0)  # a routed step called directly runs remotely; the body waits
    child = ship.start_child(doc_id)  # a child workflow: its id is "<report id>:<step>"
    return {
        "images": images,
        "sizes": [a["bytes"], b["bytes"]],
        "cover": cover,
        "shipped": child.result(),
        "child": child.id,
    }


# --8<-- [end:workflow]


def start_worker(name: str, queue: str) -> subprocess.Popen[bytes]:
    options = ["-Q", queue, "-c", "2", "-n", f"{name}@%h", "--loglevel=WARNING"]
    return spawn_worker("fanout", "FANOUT_DIR", DATA, *options, env={"FANOUT_WORKER": name})


# --8<-- [start:driver]
def demo() -> None:
    handle = report.apply_async(args=("doc-1",), run_id="report-doc-1")
    result = handle.get(timeout=120)
    print(f"images: {result['images']}")
    print(f"sizes: {result['sizes']}; cover: {result['cover']}")
    child = durable.get_handle(result["child"])
    print(f"child {child.id}: {child.status()}, {result['shipped']!r}")
    items = durable.list_items(handle.id)
    print(f"step 1 items: {[(row.item, row.status) for row in items if row.idx == 1]}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    workers = [start_worker("main", "celery"), start_worker("gpu", "gpu")]
    try:
        demo()
    finally:
        stop_workers(*workers)


if __name__ == "__main__":
    main()
