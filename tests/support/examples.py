"""Running an example of examples/ as a user would, for the tests of the examples and the docs."""

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
    assert "No hostname was supplied" not in done.stderr  # kombu's warning, on every connection
    left = sorted(path.name for path in tmpdir.iterdir())
    assert not left, f"{script} left {left} in its temp dir"
    return done.stdout
