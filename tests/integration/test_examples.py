"""The README's examples work as written: SQLite store, file broker, real worker processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.workers import ROOT, clean_env


def run_example(script: str, tmp_path: Path) -> str:
    """Run ``examples/<script>`` as a user would (none of the test session's durable
    settings in its environment, no data directory given); return what it printed. Its
    temp dir is a private one, which must be empty again once the example has exited."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    done = subprocess.run(
        [sys.executable, f"examples/{script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**clean_env(), "TMPDIR": str(tmpdir)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(path.name for path in tmpdir.iterdir())
    assert not left, f"{script} left {left} in its temp dir"
    return done.stdout


def test_quickstart_resumes_after_a_crash(tmp_path):
    printed = run_example("quickstart.py", tmp_path)
    assert "result: {'receipt': 'receipt-42-1999', 'parcel': 'parcel-42'}" in printed
    assert "times each step ran: {'reserve': 1, 'charge': 2, 'ship': 1}" in printed


def test_approval_example_signals_queries_timers_and_cancel(tmp_path):
    printed = run_example("approval.py", tmp_path)
    assert "b-1 is WAITING; query: {'stage': 'awaiting approval'}" in printed
    assert (
        "b-1 result: {'status': 'confirmed', 'receipt': 'receipt-b-1'}; "
        "query: {'stage': 'approved', 'by': 'alice'}"
    ) in printed
    assert "b-2 cancelled: customer left" in printed


def test_fanout_example_maps_routes_gathers_and_starts_a_child(tmp_path):
    printed = run_example("fanout.py", tmp_path)
    pages = [f"page-{n}.png by gpu" for n in range(1, 6)]
    assert f"images: {pages}" in printed  # every render ran on the gpu worker, in order
    assert "sizes: [100, 200]; cover: page-0.png by gpu" in printed
    assert "child report-doc-1:5: SUCCEEDED, 'shipped doc-1'" in printed
    assert "step 1 items: [(0, 'ok'), (1, 'ok'), (2, 'ok'), (3, 'ok'), (4, 'ok')]" in printed


def test_subscription_example_continues_patches_and_compensates(tmp_path):
    printed = run_example("subscription.py", tmp_path)
    assert "period 1 on v1: {'period': 1, 'paid': 1000, 'last': 'charge-alice-1'}" in printed
    # Period 1 replayed on v2 without the marker (1000), periods 2 and 3 took the tax (1200).
    assert "alice: {'periods': 3, 'paid': 3400}" in printed
    assert "generation 2, continued from sub-alice@1" in printed
    assert "mallory failed: no delivery address" in printed
    assert "mallory: compensated, compensations [('charge', 'ok')]" in printed
