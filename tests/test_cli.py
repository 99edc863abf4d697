"""``celery -A app durable ...`` through Celery's own command line."""

from __future__ import annotations

import subprocess
import sys

from tests.support.workers import ROOT


def celery(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.basic", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_migrate_sql_prints_the_ddl(basic_app):
    done = celery("durable", "migrate", "--sql")
    assert done.returncode == 0, done.stderr
    prefix = basic_app.durable.config.table_prefix
    assert f"CREATE TABLE {prefix}runs" in done.stdout
    assert f"CREATE TABLE {prefix}alembic_version" in done.stdout


def test_migrate_upgrades_and_sweep_runs(basic_app):
    done = celery("durable", "migrate")
    assert done.returncode == 0, done.stderr
    assert "at head" in done.stdout
    swept = celery("durable", "sweep")
    assert swept.returncode == 0, swept.stderr
    assert "published" in swept.stdout
