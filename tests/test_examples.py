"""The README's quick start works as written: SQLite store, file broker, a real crash."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.workers import ROOT


def test_quickstart_resumes_after_a_crash(tmp_path):
    done = subprocess.run(
        [sys.executable, "examples/quickstart.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=_clean_env(QUICKSTART_DIR=str(tmp_path)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: {'receipt': 'receipt-42-1999', 'parcel': 'parcel-42'}" in done.stdout
    assert "times each step ran: {'reserve': 1, 'charge': 2, 'ship': 1}" in done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment a user would have: none of the test session's durable settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_DURABLE_")}
    return {**env, **extra}


def test_approval_example_signals_queries_timers_and_cancel(tmp_path):
    done = subprocess.run(
        [sys.executable, "examples/approval.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=_clean_env(APPROVAL_DIR=str(tmp_path)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "b-1 is WAITING; query: {'stage': 'awaiting approval'}" in done.stdout
    assert (
        "b-1 result: {'status': 'confirmed', 'receipt': 'receipt-b-1'}; "
        "query: {'stage': 'approved', 'by': 'alice'}"
    ) in done.stdout
    assert "b-2 cancelled: customer left" in done.stdout
