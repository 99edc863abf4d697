"""The test app's command line: ``celery -A tests.apps.basic ...`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Mapping
from typing import Any

from tests.support.workers import ROOT


def celery(
    *args: str, env: Mapping[str, str] | None = None, app: str = "tests.apps.basic"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", app, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def revoke_by_cli(task_id: str) -> None:
    """``celery control revoke``: Celery's own revoke, which the sweeper turns into a cancel."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.basic", "control", "revoke", task_id],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def invoke(durable: Any, *args: str) -> str:
    """``celery -A app durable ARGS`` in-process, on ``durable``'s app (click's runner);
    its output, the command having succeeded."""
    from click.testing import CliRunner  # noqa: PLC0415 - only the in-process tests need it

    from celery_durable.cli import durable as durable_group  # noqa: PLC0415

    done = CliRunner().invoke(durable_group, list(args), obj=types.SimpleNamespace(app=durable.app))
    assert done.exit_code == 0, done.output
    return str(done.output)
