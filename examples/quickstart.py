"""Quick start on the embedded default: a SQLite store and a broker kept in plain files.

Run it (no server needed)::

    python examples/quickstart.py

It starts a real ``celery worker``, starts a 3-step workflow, SIGKILLs the worker while
step 2 runs, starts a second worker, and shows the workflow resuming at step 2: step 1
ran once, step 2 twice, step 3 once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from celery import Celery
from scratch import data_dir, file_broker, spawn_worker

from celery_durable import Durable

DATA = data_dir("QUICKSTART_DIR", driver=__name__ == "__main__")
EFFECTS = DATA / "effects.log"
HOLD = DATA / "hold-step-2"

# --8<-- [start:app]
app = Celery("quickstart", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(
    app, database_url=f"sqlite:///{DATA}/durable.sqlite3", lock_timeout=3, poll_interval=0.2
)
# --8<-- [end:app]


def did(what: str) -> None:
    with EFFECTS.open("a") as log:
        log.write(what + "\n")


# --8<-- [start:workflow]
@durable.step
def reserve(order_id: int) -> dict:
    did("reserve")
    return {"order": order_id, "amount": 1999}


@durable.step
def charge(order_id: int, amount: int) -> str:
    did("charge")
    while HOLD.exists():  # the demo kills the worker while we wait here
        time.sleep(0.05)
    return f"receipt-{order_id}-{amount}"


@durable.step
def ship(order_id: int) -> str:
    did("ship")
    return f"parcel-{order_id}"


@durable.workflow
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    receipt = charge(order_id, item["amount"])
    return {"receipt": receipt, "parcel": ship(order_id)}
    # --8<-- [end:workflow]


def start_worker(name: str) -> subprocess.Popen[bytes]:
    options = ["-P", "prefork", "-c", "1", "-n", f"{name}@%h", "--loglevel=WARNING"]
    return spawn_worker(
        "quickstart",
        "QUICKSTART_DIR",
        DATA,
        *options,
        # The worker's temp files (billiard's) go in DATA too: the SIGKILL leaves them behind.
        env={"TMPDIR": str(DATA)},
        start_new_session=True,
    )


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


# --8<-- [start:main]
def main() -> None:
    durable.migrate()
    HOLD.touch()
    first = start_worker("first")
    handle = checkout.delay(42)
    print(f"started workflow {handle.id}")
    wait_for(
        lambda: "charge" in EFFECTS.read_text() if EFFECTS.exists() else False,
        60,
        "step 2 to start",
    )
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    print("worker killed during step 2 (charge)")
    HOLD.unlink()
    second = start_worker("second")
    try:
        result = handle.get(timeout=60)
    finally:
        second.terminate()  # warm shutdown of the main process
        second.wait(30)
    counts = {
        step: EFFECTS.read_text().split().count(step) for step in ("reserve", "charge", "ship")
    }
    print(f"result: {result}")
    print(f"times each step ran: {counts}")
    # --8<-- [end:main]


if __name__ == "__main__":
    main()
