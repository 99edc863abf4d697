"""The booking on a real worker and a real broker (``CELERY_BROKER_URL``): what eager mode
doesn't cover, the worker's processes and the broker's deliveries. The test's clock still
fires the day-long sleep: it moves the timer in the store, and its sweep publishes the
wake-up to the worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from booking import booking, durable

import celery_durable as cd
from celery_durable.testing import Clock

HERE = Path(__file__).resolve().parent


# --8<-- [start:worker]
def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """``celery -A booking worker`` in its own process group, with this process's
    environment (the store, the broker, the queue), logging to a file."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    queue = str(durable.app.conf.task_default_queue)
    command = [sys.executable, "-m", "celery", "-A", "booking", "worker", "-c", "2", "-Q", queue]
    command += ["-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--loglevel=INFO"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            cwd=HERE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its pool's processes are in its group
        )
    try:
        wait_until(lambda: " ready." in log_path.read_text(), 60, "the worker ready")
        yield process
    finally:
        process.terminate()  # a warm shutdown
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    # --8<-- [end:worker]


# --8<-- [start:test]
def test_a_worker_runs_the_booking_and_the_clock_fires_its_sleep(worker: subprocess.Popen[bytes]):
    handle = booking.delay("w-1")  # published to the broker: the worker runs it
    wait_until(lambda: handle.status() is cd.WorkflowStatus.WAITING, 60, "waiting for approval")
    handle.signal("approval", {"by": "ann"})
    wait_until(  # waiting again, now for its day of grace
        lambda: handle.status() is cd.WorkflowStatus.WAITING and not handle.record().wait_signal,
        60,
        "the day's sleep",
    )
    assert Clock([durable]).advance(86400) == 1  # the wake-up goes to the worker
    assert handle.get(timeout=60) == {"status": "confirmed", "by": "ann", "receipt": "receipt-w-1"}
    # --8<-- [end:test]
