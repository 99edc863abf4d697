"""A worker app for batched maps (``cd.map(..., batch_size=K)``), on the same database and
namespace as tests.apps.basic, on a queue of its own. Its step appends each execution's
item number to a file outside the store, so a test can tell which items ran how often,
across SIGKILLs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

QUEUE = os.environ.get("TEST_QUEUE", "celery") + ".batched"

app = Celery("batched", broker=os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=QUEUE, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True
)
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic

# Items before ``hold`` take this long, so that a batch passes a lease beat (the test
# settings' durable_lock_timeout of 3 s / 3) and records them before it reaches ``hold``.
SLOW = 0.4
# The held item runs at least this long once let go: longer than durable_poll_interval
# (0.2 s here), so the batch reads its run's state again before its next item.
HELD_AT_LEAST = 0.5


def executions(path: str) -> list[int]:
    """The item numbers the step ran, in the order it ran them."""
    log = Path(path)
    return [int(line) for line in log.read_text().split()] if log.exists() else []


@durable.step(max_attempts=3, backoff=0.05)
def logged(path: str, n: int, hold: int, failures: int, broken: int) -> int:
    """Note the execution; item ``hold`` waits while ``<path>.gate`` exists (a minute at
    most), those before it are slow; item ``failures``'s first two executions fail (a
    retry), item ``broken`` always fails."""
    ran_before = executions(path).count(n)
    with open(path, "a") as log:
        log.write(f"{n}\n")
    if n < hold:
        time.sleep(SLOW)
    elif n == hold:
        started, deadline = time.monotonic(), time.monotonic() + 60
        while os.path.exists(f"{path}.gate") and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(max(0.0, started + HELD_AT_LEAST - time.monotonic()))
    if n == failures and ran_before < 2:
        raise ConnectionError(f"item {n} fails on execution {ran_before + 1}")
    if n == broken:
        raise ValueError(f"item {n} is broken")
    return n * 10


@durable.workflow
def logged_map(
    path: str,
    count: int,
    size: int,
    hold: int = -1,
    failures: int = -1,
    broken: int = -1,
    exceptions: bool = False,
) -> list:
    """``cd.map`` of ``logged`` over ``range(count)``, ``size`` items to a task; a failed
    item comes back as its error type with ``exceptions``."""
    results = cd.map(
        logged,
        [path] * count,
        range(count),
        [hold] * count,
        [failures] * count,
        [broken] * count,
        batch_size=size,
        return_exceptions=exceptions,
    )
    return [r if isinstance(r, int) else r.error_type for r in results]
