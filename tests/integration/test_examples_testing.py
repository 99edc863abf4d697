"""The examples of the guides "Testing your workflows" and "Transactional starts":
examples/testing/ (booking.py, conftest.py, test_booking.py) as a user's test suite, run by
``python -m pytest`` in a subprocess with no worker, no broker that answers, and none of
this session's durable settings; and examples/transactional.py, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.examples import run_example
from tests.support.workers import ROOT, clean_env

EXAMPLE = ROOT / "examples" / "testing"


def test_the_testing_example_passes_without_a_worker_or_a_broker(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(EXAMPLE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **clean_env(),
            # Port 1 has no broker: an eager run that published would fail, not pass.
            "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
            "TMPDIR": str(tmp_path),
            "PYTEST_ADDOPTS": "",
        },
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    # The example's own pytest.ini makes it the rootdir: the suite's settings stay out.
    assert f"rootdir: {EXAMPLE}" in said, said
    assert "4 passed in" in said, said


def test_transactional_example_commits_with_the_order_and_rolls_back_with_it(tmp_path: Path):
    printed = run_example("transactional.py", tmp_path)
    assert "order 1: {'order': 1, 'status': 'paid'}" in printed
    rolled_back = [line for line in printed.splitlines() if line.startswith("rolled back:")]
    assert len(rolled_back) == 1 and "no lamp order, and no run " in rolled_back[0], printed
    assert "orders: [(1, 'book', 'paid')]" in printed  # the lamp's row went with its run
