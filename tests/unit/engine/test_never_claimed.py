"""durable_max_dispatches: a run the sweeper publishes again and again that no worker ever
claims is failed as poison, naming the count and the setting (issue 41, point 1). A real
sweep on SQLite, its messages going to an in-memory broker nobody consumes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from celery import Celery

from celery_durable import Durable, WorkflowFailed
from celery_durable.core.config import DurableConfig
from tests.support.waiting import wait_until


def test_the_setting_defaults_to_10_and_is_read_like_the_others():
    assert DurableConfig.from_sources(environ={}).max_dispatches == 10
    env = {"CELERY_DURABLE_MAX_DISPATCHES": "4"}
    assert DurableConfig.from_sources(environ=env).max_dispatches == 4


def test_a_run_no_worker_claims_fails_after_max_dispatches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL", "DISPATCH_GRACE"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("unclaimed", broker="memory://")
    durable = Durable(
        app,
        database_url=f"sqlite:///{tmp_path}/store.sqlite3",
        dispatch_grace=1,
        max_dispatches=2,
    )
    durable.migrate()

    @durable.workflow(name="u.never")
    def never() -> None: ...

    handle = never.delay()
    caplog.set_level(logging.ERROR, "celery_durable.worker")
    try:
        wait_until(
            lambda: (
                durable.runtime.sweeper.sweep_once() >= 0
                and durable.runtime.store.get_status(handle.id) == "FAILED"
            ),
            30,
            0.2,
        )
        with pytest.raises(WorkflowFailed) as failed:
            handle.get(timeout=5)
    finally:
        durable.runtime.store.dispose()
    assert failed.value.error_type == "celery_durable.errors.NeverClaimed"
    assert "no worker claimed this run in 2 dispatches (durable_max_dispatches=2)" in (
        failed.value.error_message
    )
    assert handle.record().attempts == 0
    lines = [r.getMessage() for r in caplog.records if handle.id in r.getMessage()]
    assert len(lines) == 1 and "durable_max_dispatches=2" in lines[0], lines
