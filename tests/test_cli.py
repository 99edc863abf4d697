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


def test_show_signal_and_cancel_a_run(basic_app, shared_worker, key):
    from tests.support.waiting import wait_until

    handle = basic_app.collector.delay(key, 2)
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    shown = celery("durable", "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "WAITING" in shown.stdout and "waiting for signal 'item'" in shown.stdout
    sent = celery("durable", "signal", handle.id, "item", '{"n": 1}')
    assert sent.returncode == 0 and "stored" in sent.stdout, sent.stderr
    wait_until(lambda: len(basic_app.durable.store.load_steps(handle.id)) >= 2, 30)
    cancelled = celery("durable", "cancel", handle.id, "--reason", "cli")
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until(lambda: handle.status().value == "CANCELLED", 30, message="the cancellation")
    missing = celery("durable", "show", f"nope-{key}")
    assert missing.returncode != 0 and f"nope-{key}" in missing.stderr
