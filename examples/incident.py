"""An incident from start to end with the CLI alone, on the embedded default.

Run it (no server needed)::

    python examples/incident.py

A shop's ``charge`` step has a bug in one deploy (``INCIDENT_BUG=1``: amounts over 2000 are
refused) and not in the next. The driver starts the buggy worker and eight orders and a
refund, then runs what an operator would: ``durable stats``, ``list --status failed`` and
``show`` (what is failing, which runs, why), restarts the worker without the bug, runs
``resume --dry-run`` and ``resume`` (fix it), ``show`` and ``stats`` again (check), and
signals the waiting refund. Each command is the click group that ``celery -A incident
durable`` runs, called in the driver's process (a new ``celery`` process per command would
only add seconds), so its output is what an operator sees.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from types import SimpleNamespace

from celery import Celery
from scratch import data_dir, file_broker, spawn_worker, stop_workers

import celery_durable as cd
from celery_durable import Durable, WorkflowStatus
from celery_durable.cli import durable as durable_group

DATA = data_dir("INCIDENT_DIR", driver=__name__ == "__main__")

# --8<-- [start:app]
app = Celery("incident", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(
    app, database_url=f"sqlite:///{DATA}/durable.sqlite3", lock_timeout=3, poll_interval=0.2
)


@durable.step
def reserve(order_id: int) -> dict:
    return {"order": order_id, "amount": 1000 + 500 * (order_id % 4)}


@durable.step
def charge(order_id: int, amount: int) -> str:
    if os.environ.get("INCIDENT_BUG") and amount > 2000:  # the bad deploy
        raise ValueError(f"amount {amount} is over the card limit of 2000")
    return f"receipt-{order_id}-{amount}"


@durable.step
def ship(order_id: int) -> str:
    return f"parcel-{order_id}"


@durable.workflow(max_attempts=2, retry_backoff=0.5)
def checkout(order_id: int) -> dict:
    item = reserve(order_id)
    receipt = charge(order_id, item["amount"])
    return {"receipt": receipt, "parcel": ship(order_id)}


@durable.workflow
def refund(order_id: int) -> str:
    decision = cd.wait_for_signal("approval")
    return f"refunded {order_id} ({decision})"


# --8<-- [end:app]


def start_worker(name: str, **extra: str) -> subprocess.Popen[bytes]:
    options = ["-P", "prefork", "-c", "1", "-n", f"{name}@%h", "--loglevel=WARNING"]
    return spawn_worker(
        "incident",
        "INCIDENT_DIR",
        DATA,
        *options,
        # Only the worker started with the bug has it, whatever the driver's environment.
        env={"INCIDENT_BUG": None, "TMPDIR": str(DATA), **extra},
        start_new_session=True,
        # Its log (the bad deploy's tracebacks) goes to a file, not between the commands.
        stdout=(DATA / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def durable_command(*args: str) -> None:
    """What ``celery -A incident durable ARGS`` prints: the same click group, run here."""
    print(f"$ celery -A incident durable {shlex.join(args)}", flush=True)
    durable_group.main(
        args=list(args), prog_name="durable", obj=SimpleNamespace(app=app), standalone_mode=False
    )
    print(flush=True)


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def finished(handles: list) -> bool:  # type: ignore[type-arg]
    return all(handle.status().finished for handle in handles)


def main() -> None:
    durable.migrate()
    buggy = start_worker("buggy", INCIDENT_BUG="1")
    orders = [checkout.delay(n) for n in range(1, 9)]
    waiting = refund.delay(9)
    try:
        wait_for(lambda: finished(orders), 120, "the orders to finish")
        wait_for(lambda: waiting.status() is WorkflowStatus.WAITING, 60, "the refund to wait")
    finally:
        stop_workers(buggy, timeout=60)
    print("# What is failing?")
    durable_command("stats")
    print("# Which runs, and why?")
    failed = [h for h in orders if h.status() is WorkflowStatus.FAILED]
    durable_command("list", "--status", "failed")
    durable_command("show", failed[0].id)
    print("# Fix it: the worker restarts without the bug")
    fixed = start_worker("fixed")
    try:
        durable_command("resume", "--workflow", checkout.name, "--since", "1h", "--dry-run")
        durable_command("resume", "--workflow", checkout.name, "--since", "1h")
        wait_for(lambda: finished(failed), 120, "the resumed orders to finish")
        print("# Check")
        durable_command("show", failed[0].id)
        durable_command("resume", "--workflow", checkout.name, "--since", "1h")
        durable_command("stats")
        durable_command("signal", waiting.id, "approval", '"alice"')
        print(f"refund: {waiting.get(timeout=60)}")
    finally:
        stop_workers(fixed, timeout=60)


if __name__ == "__main__":
    main()
