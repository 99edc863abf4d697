"""``celery -A app durable ...`` through Celery's own command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from celery_durable.store import migrations
from celery_durable.store.store import StepRecord
from tests.support.cli import celery
from tests.support.services import PG_URL, drop_tables, unique
from tests.support.waiting import wait_until


def newest_revision() -> str:
    """The head, from the revisions' file names (0001_initial.py ...: one line of them)."""
    return max(path.name[:4] for path in Path(migrations.HERE, "versions").glob("[0-9]*.py"))


def test_migrate_sql_prints_the_ddl(basic_app):
    done = celery("durable", "migrate", "--sql")
    assert done.returncode == 0, done.stderr
    prefix = basic_app.durable.config.table_prefix
    assert f"CREATE TABLE {prefix}runs" in done.stdout
    assert f"CREATE TABLE {prefix}alembic_version" in done.stdout


def test_migrate_upgrades_and_sweep_runs(basic_app):
    done = celery("durable", "migrate")
    assert done.returncode == 0, done.stderr
    head = newest_revision()
    assert f"already at {head} (head), nothing to do" in done.stdout
    swept = celery("durable", "sweep")
    assert swept.returncode == 0, swept.stderr
    assert "published" in swept.stdout


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_migrate_says_whether_it_created_upgraded_or_found_nothing_to_do(
    database: str, tmp_path: Path
) -> None:
    prefix = unique("m")[:9] + "_"
    url = PG_URL if database == "postgresql" else f"sqlite:///{tmp_path}/store.sqlite3"
    env = {"CELERY_DURABLE_DATABASE_URL": url, "CELERY_DURABLE_TABLE_PREFIX": prefix}
    tables = f"celery_durable tables ({prefix}*)"
    head = newest_revision()
    try:
        created = celery("durable", "migrate", "--revision", "0003", env=env)
        assert created.returncode == 0, created.stderr
        assert created.stdout == f"{tables} created at revision 0003\n"
        upgraded = celery("durable", "migrate", env=env)
        assert upgraded.returncode == 0, upgraded.stderr
        assert upgraded.stdout == f"{tables} upgraded from 0003 to {head} (head)\n"
        again = celery("durable", "migrate", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout == f"{tables} already at {head} (head), nothing to do\n"
    finally:
        if database == "postgresql":
            drop_tables(PG_URL, prefix)


def test_show_signal_and_cancel_a_run(basic_app, shared_worker, key):
    store = basic_app.durable.runtime.store
    handle = basic_app.collector.delay(key, 2)
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    assert [s.status for s in store.load_steps(handle.id).values()] == ["ok", "waiting"]
    shown = celery("durable", "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "WAITING" in shown.stdout and "waiting for signal 'item'" in shown.stdout
    assert "attempt 1/3" in shown.stdout  # it ran, although the suspension gave it back
    sent = celery("durable", "signal", handle.id, "item", '{"n": 1}')
    assert sent.returncode == 0 and "stored" in sent.stdout, sent.stderr

    # The run woke up and recorded the signal as its wait step's output...
    def wait_step_done() -> StepRecord | None:
        step = store.load_steps(handle.id).get(1)
        return step if step is not None and step.status == "ok" else None

    step = wait_until(wait_step_done, 30, message="the run to consume the signal")
    assert step.name == "celery_durable.signal:item"
    assert json.loads(step.output) == {"n": 1}
    # ...from the one row the command stored, now marked consumed.
    signals = store.tables.signals
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                signals.c.name, signals.c.payload, signals.c.consumed_at, signals.c.error
            ).where(
                signals.c.namespace == basic_app.durable.config.namespace,
                signals.c.run_id == handle.id,
            )
        ).all()
    assert len(rows) == 1, rows
    assert rows[0].name == "item" and json.loads(rows[0].payload) == {"n": 1}
    assert rows[0].consumed_at is not None and rows[0].error is None
    cancelled = celery("durable", "cancel", handle.id, "--reason", "cli")
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until(lambda: handle.status().value == "CANCELLED", 30, message="the cancellation")
    after = celery("durable", "show", handle.id).stdout
    assert "CANCELLED  attempt 1/3" in after
    assert "step 2: celery_durable.signal:item not reached (run cancelled while waiting)" in after
    missing = celery("durable", "show", f"nope-{key}")
    assert missing.returncode != 0 and f"nope-{key}" in missing.stderr


def test_show_says_how_step_and_workflow_retries_multiply(basic_app, shared_worker, key):
    handle = basic_app.not_retried_step.delay(key)  # a 5-try step in a 3-attempt workflow
    wait_until(lambda: handle.status().value == "FAILED", 30, message="the run to fail")
    shown = celery("durable", "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "up to 5 tries per attempt x 3 attempts = 15 calls" in shown.stdout
    assert "step 0: tests.apps.basic.keyerror_step error" in shown.stdout
    # Its row is the last attempt's: when that attempt ran it.
    line = next(x for x in shown.stdout.splitlines() if "step 0:" in x)
    started = r"started 20\d\d-\d\d-\d\dT[\d:.]+Z"
    assert re.search(r" error  \d+\.\d\ds  attempt 3  " + started, line), line


def test_signal_without_a_payload_says_it_sends_null(basic_app, shared_worker, key):
    handle = basic_app.approval_or_timeout.delay(key, 3600)
    wait_until(lambda: handle.status().value == "WAITING", 30, message="the run to wait")
    sent = celery("durable", "signal", handle.id, "approval")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "stored with the payload null (no PAYLOAD given)"
    # The body told the signal from a timeout (its default= is "timed out").
    assert handle.get(timeout=30) == [None, 2]


def test_a_cancel_of_a_running_run_is_shown_until_it_stops(basic_app, shared_worker, key, rds):
    """Bug: cancel printed only RUNNING, and show, list and JSON said nothing of it."""
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 0 to start")
    cancelled = celery("durable", "cancel", handle.id, "--reason", "no longer needed")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == (
        f"{handle.id}: RUNNING, cancel requested: it stops at its next step"
    )
    shown = celery("durable", "show", handle.id).stdout.splitlines()
    assert "RUNNING  attempt 1/3" in shown[0]
    assert "cancel requested (no longer needed): it stops at its next step" in shown
    assert json.loads(celery("durable", "show", handle.id, "--json").stdout)["cancel_requested"]
    listed = celery("durable", "list", "--workflow", handle.name, "--limit", "1000")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(handle.id))
    assert "RUNNING" in line and line.endswith("cancel requested: no longer needed")
    lines = celery("durable", "list", "--workflow", handle.name, "--json").stdout.splitlines()
    (mine,) = [json.loads(x) for x in lines if json.loads(x)["id"] == handle.id]
    assert mine["status"] == "RUNNING" and mine["cancel_requested"] is True
    assert handle.status().value == "RUNNING" and handle.record().cancel_requested
    rds.delete(f"block:{key}:s1")
    wait_until(lambda: handle.status().value == "CANCELLED", 30, message="the cancellation")
    after = celery("durable", "show", handle.id).stdout
    assert "cancel requested" not in after  # it happened: the status says so
