"""The embedded default: SQLite store, Celery in eager mode (no broker, no worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

import celery_durable as cd
from celery_durable import Durable, NonDeterminismError, WorkflowFailed, WorkflowStatus


@pytest.fixture
def durable(tmp_path, monkeypatch) -> Iterator[Durable]:  # type: ignore[no-untyped-def]
    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("embedded", broker="memory://")
    app.conf.task_always_eager = True
    instance = Durable(app, database_url=f"sqlite:///{tmp_path}/store.sqlite3")
    instance.migrate()
    yield instance
    instance.store.dispose()


def test_workflow_records_steps_and_replays_them(durable):
    calls: list[int] = []

    @durable.step
    def double(n: int) -> int:
        calls.append(n)
        return n * 2

    @durable.workflow(max_attempts=2, retry_backoff=0)
    def pipeline(n: int) -> int:
        total = double(n) + double(n + 1)
        cd.set_state({"total": total})
        return total

    handle = pipeline.delay(5)
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert handle.get(timeout=5) == 22 and calls == [5, 6]
    assert handle.query() == {"total": 22}
    assert [s.output for s in durable.store.load_steps(handle.id).values()] == ["10", "12"]


def test_retry_then_replay_on_sqlite(durable):
    calls: list[str] = []

    @durable.step
    def fetch() -> str:
        calls.append("fetch")
        return "data"

    @durable.workflow(max_attempts=2, retry_backoff=0)
    def fragile() -> str:
        value = fetch()
        if calls.count("body") == 0:
            calls.append("body")
            raise RuntimeError("first attempt fails")
        return value

    handle = fragile.delay()
    assert handle.status() is WorkflowStatus.PENDING  # retry scheduled in the database
    durable.sweep_once()  # republishes: eager mode runs it at once
    assert handle.get(timeout=5) == "data"
    assert calls == ["fetch", "body"]  # fetch was replayed, not re-run


def test_determinism_guard_on_sqlite(durable):
    @durable.step
    def a() -> int:
        return 1

    @durable.step
    def b() -> int:
        return 2

    flip = {"first": True}

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def drifting() -> None:
        first, flip["first"] = flip["first"], False
        (a if first else b)()
        raise RuntimeError("retry")

    handle = drifting.delay()
    durable.sweep_once()
    with pytest.raises(WorkflowFailed, match="NonDeterminismError") as failed:
        handle.get(timeout=5)
    assert "step 0" in failed.value.error_message
    assert NonDeterminismError.__name__ in failed.value.error_type


def test_sleep_suspends_and_the_sweeper_fires_the_timer(durable):
    @durable.workflow
    def nap() -> str:
        cd.sleep(0.05)
        return "rested"

    handle = nap.delay()
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.record().owner is None

    def fired() -> bool:
        durable.sweep_once()
        return handle.status() is WorkflowStatus.SUCCEEDED

    from tests.support.waiting import wait_until

    wait_until(fired, 10, message="the timer to fire")
    assert handle.get(timeout=5) == "rested"
