"""The examples of the guides "Testing your workflows" and "Transactional starts":
examples/testing/ (booking.py, conftest.py, test_booking.py, test_booking_worker.py) as a
user's test suite, run by ``python -m pytest`` in a subprocess with none of this
session's durable settings; and examples/transactional.py, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.examples import run_example
from tests.support.services import BROKER_URL, UNREACHABLE_BROKER_URL, delete_queues, unique
from tests.support.workers import ROOT, clean_env

EXAMPLE = ROOT / "examples" / "testing"


def run_pytest(target: Path, tmp_path: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**clean_env(), "TMPDIR": str(tmp_path), "PYTEST_ADDOPTS": "", **env},
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    # The example's own pytest.ini makes it the rootdir: the suite's settings stay out.
    assert f"rootdir: {EXAMPLE}" in said, said
    return said


def test_the_eager_tests_pass_without_a_worker_or_a_broker(tmp_path: Path):
    # Nothing listens on the broker's address: an eager run that published would fail.
    said = run_pytest(
        EXAMPLE / "test_booking.py", tmp_path, CELERY_BROKER_URL=UNREACHABLE_BROKER_URL
    )
    assert "4 passed in" in said, said


@pytest.mark.broker
def test_the_whole_example_passes_with_a_real_worker_on_the_broker(tmp_path: Path):
    queue, namespace = unique("booking-"), unique("booking")
    try:
        said = run_pytest(
            EXAMPLE,
            tmp_path,
            CELERY_BROKER_URL=BROKER_URL,
            BOOKING_QUEUE=queue,  # no other worker on the broker takes its runs
            CELERY_DURABLE_NAMESPACE=namespace,
        )
    finally:
        delete_queues(BROKER_URL, [queue, f"celery_durable.signals.{namespace}"])
    assert "5 passed in" in said, said


def test_transactional_example_commits_with_the_order_and_rolls_back_with_it(tmp_path: Path):
    printed = run_example("transactional.py", tmp_path)
    assert "order 1: {'order': 1, 'status': 'paid'}" in printed
    rolled_back = [line for line in printed.splitlines() if line.startswith("rolled back:")]
    assert len(rolled_back) == 1 and "no lamp order, and no run " in rolled_back[0], printed
    assert "orders: [(1, 'book', 'paid')]" in printed  # the lamp's row went with its run
