"""Where an example keeps its files: one temp directory per run, removed when it ends.

``python examples/<name>.py`` (the driver) makes the directory, hands it to the workers it
starts through an environment variable, and removes it at exit. Every other process that
imports the example (its workers) only reads that variable, so a run leaves nothing
behind. A directory given in the variable by whoever starts the driver is theirs: kept.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def data_dir(variable: str, driver: bool) -> Path:
    """The run's directory, from ``variable``; the driver (``driver=True``) makes one
    when the variable is unset and removes it at exit."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    if not driver:
        raise SystemExit(
            f"{variable} is not set: the example's driver (python examples/...) sets it for "
            "the workers it starts"
        )
    path = tempfile.mkdtemp(prefix="celery-durable-")
    os.environ[variable] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)
