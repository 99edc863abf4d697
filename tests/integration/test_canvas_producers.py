"""Workflows started by name: a bare ``Celery()`` app's ``send_task`` (with arguments that
fit and that don't), ``celery call``, and a real ``celery beat`` process."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery

from celery_durable import ArgumentsRefused
from tests.support.services import BROKER_URL, REDIS_URL
from tests.support.waiting import wait_until
from tests.support.workers import CeleryProcess, celery_command

pytestmark = pytest.mark.usefixtures("canvas_worker")


def test_send_task_from_an_app_without_the_workflow_code_starts_the_run(canvas_app, key):
    canvas = canvas_app
    bare = Celery("bare", broker=BROKER_URL, backend=REDIS_URL)
    try:
        sent = bare.send_task(
            canvas.tagged.name, args=[4, key], queue=canvas.QUEUE, task_id=f"{key}-named"
        )
        assert sent.get(timeout=60) == {"value": 8, "tag": key}
        run = canvas.durable.get_handle(f"{key}-named").record()
        assert (run.status, run.name) == ("SUCCEEDED", canvas.tagged.name)

        refused = bare.send_task(canvas.tagged.name, args=[4], queue=canvas.QUEUE)
        with pytest.raises(ArgumentsRefused, match=f"{canvas.tagged.name}.*missing a required"):
            refused.get(timeout=60)
        stored = canvas.durable.get_handle(refused.id).record()
        assert stored.status == "FAILED" and "ArgumentsRefused" in (stored.error or "")
        assert json.loads(stored.args) == [[4], {}]  # kept as sent, for the operator
    finally:
        bare.close()


def test_celery_call_starts_a_run_by_name(canvas_app, key):
    canvas = canvas_app
    command = celery_command(
        "tests.apps.canvas",
        ["call", canvas.tagged.name, "--args", json.dumps([6, key]), "--queue", canvas.QUEUE],
    )
    printed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    task_id = printed.stdout.strip().splitlines()[-1]
    assert canvas.app.AsyncResult(task_id).get(timeout=60) == {"value": 12, "tag": key}
    assert canvas.durable.get_handle(task_id).status().value == "SUCCEEDED"


def test_beat_starts_one_run_per_firing(canvas_app, key, tmp_path):
    canvas = canvas_app
    schedule = str(tmp_path / "beat-schedule")
    beat = CeleryProcess(
        "tests.apps.canvas",
        ["beat", "-s", schedule, "--loglevel=INFO", "--max-interval", "1"],
        {"TEST_BEAT_KEY": key},
        "beat",
    )
    try:
        wait_until(lambda: beat.log().count("Sending due task tick") >= 3, 60, message="3 ticks")
    finally:
        beat.stop()
    fired_count = beat.log().count("Sending due task tick")
    runs = canvas.durable.runtime.store.tables.runs
    tick_runs = sa.select(runs.c.id, runs.c.status).where(
        runs.c.name == canvas.tick.name, runs.c.args.contains(key)
    )

    def all_done() -> list[Any]:
        with canvas.durable.runtime.store.engine.connect() as conn:
            rows = conn.execute(tick_runs).all()
        return rows if rows and {r.status for r in rows} == {"SUCCEEDED"} else []

    # Beat logs "Sending due task" before it sends: the stop (SIGTERM) can cut the last
    # firing short, which then started no run (one cut after its run's insert is published
    # by the sweeper). Every other firing started exactly one run, and none two.
    wait_until(lambda: len(all_done()) >= fired_count - 1, 60, message=f"{fired_count} runs")
    rows = all_done()
    assert fired_count - 1 <= len(rows) <= fired_count, (fired_count, rows)
    assert int(canvas._redis.get(f"ticks:{key}")) == len(rows)
