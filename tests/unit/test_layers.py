"""The import-linter contract: layers import one way (see pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess

from tests.support.workers import ROOT


def test_layers_import_one_way():
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "import-linter is part of the [test] extra"
    done = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout
