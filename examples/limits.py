"""Limiters, priority, dedup, debounce and a deadline, on the embedded default.

Run it (no server needed)::

    python examples/limits.py

A step behind a per-tenant limiter runs one call per tenant at a time, however many
workers' processes are free. A workflow limited to one run at a time starts its waiting
runs by priority. Starts with one dedup key make one run; debounced calls make one run
with the last call's arguments. A run waiting past its deadline is cancelled.
"""

from __future__ import annotations

import time

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable, WorkflowCancelled

DATA = data_dir("LIMITS_DIR", driver=__name__ == "__main__")


app = Celery("limits", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)

# --8<-- [start:limiter]
# One call at a time per tenant, fleet-wide: the slots are rows in the database.
tenant_api = durable.limiter("tenant-api", concurrency=1, key=lambda tenant, *_: tenant)


@durable.step(limiter=tenant_api)
def call_api(tenant: str, batch: int) -> tuple[float, float]:
    started = time.time()
    time.sleep(0.3)  # the API call
    return started, time.time()


@durable.workflow
def import_batch(tenant: str, batch: int) -> tuple[float, float]:
    return call_api(tenant, batch)  # a run with no free slot waits, holding no worker
    # --8<-- [end:limiter]


def held(name: str) -> None:
    """The driver holds a run here while a file of that name exists (a minute at most), so
    that the others are queued behind it, however slow the machine."""
    deadline = time.monotonic() + 60
    while (DATA / name).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@durable.step
def rebuild_index(label: str) -> float:
    held(label)
    time.sleep(0.1)
    return time.time()


# --8<-- [start:priority]
@durable.workflow(concurrency=1)  # a limiter of its own, "workflow:<name>": one run at a time
def rebuild(label: str) -> tuple[str, float]:
    return label, rebuild_index(label)
    # --8<-- [end:priority]


@durable.step
def sync(user: str, version: int) -> str:
    held(user)
    return f"{user} synced at version {version}"


@durable.workflow
def sync_user(user: str, version: int) -> str:
    return sync(user, version)


# --8<-- [start:deadline]
@durable.workflow(timeout=1)  # seconds, "30s", "2h" or a timedelta
def await_payment(order: str) -> object:
    return cd.wait_for_signal("paid")  # never sent: the deadline cancels the run
    # --8<-- [end:deadline]


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """How many of the (start, end) spans overlapped at most."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, change in edges:
        running += change
        most = max(most, running)
    return most


# --8<-- [start:drive]
def drive() -> None:
    runs = [import_batch.delay(tenant, n) for tenant in "ab" for n in range(3)]
    spans = [run.get(timeout=60) for run in runs]
    print("most calls at once, per tenant:", [most_at_once(spans[:3]), most_at_once(spans[3:])])

    (DATA / "first").touch()  # "first" holds its slot until the driver removes the file
    first = rebuild.delay("first")  # takes the only slot as it is inserted
    low = rebuild.apply_async(("low",), priority=0)  # PENDING: no message until a slot
    high = rebuild.apply_async(("high",), priority=9)
    (DATA / "first").unlink()
    done = sorted((run.get(timeout=60) for run in (first, low, high)), key=lambda d: d[1])
    print("rebuilt in order:", [label for label, _ in done])

    (DATA / "alice").touch()  # alice's run stays active until both calls are made
    one = sync_user.apply_async(("alice", 1), dedup_key="user-alice")
    again = sync_user.apply_async(("alice", 2), dedup_key="user-alice")
    (DATA / "alice").unlink()
    print("one run for the key:", again.id == one.id, "->", one.get(timeout=60))

    calls = [
        sync_user.apply_async(("bob", version), dedup_key="user-bob", debounce=1)
        for version in (1, 2, 3)
    ]
    print("debounced:", len({call.id for call in calls}), "run ->", calls[0].get(timeout=60))

    late = await_payment.delay("o-1")
    try:
        late.get(timeout=60)
    except WorkflowCancelled as exc:
        print(f"o-1 {late.status()}: {exc.reason}")
    # --8<-- [end:drive]


def main() -> None:
    durable.migrate()
    with worker("limits", "LIMITS_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        drive()


if __name__ == "__main__":
    main()
