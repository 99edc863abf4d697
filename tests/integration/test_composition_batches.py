"""Batched maps (``cd.map(..., batch_size=K)``) with real workers, on the session's broker:
a SIGKILL mid-batch re-runs only the items whose records weren't committed (before the
first lease beat, while the first delivery's transaction is open: the whole batch); an item that
fails, with retries and for good, with and without return_exceptions; a parent cancelled
mid-batch; a revoke of the batch's task id. Each item's executions are logged to a file
outside the store (``tests/apps/batched.py``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from celery_durable import WorkflowCancelled, WorkflowFailed, WorkflowStatus
from celery_durable.engine.publish import item_task_id
from tests.support.waiting import wait_until

APP = "tests.apps.batched"


def _start(start_worker: Any, batched_app: Any, name: str) -> Any:
    return start_worker(name, app=APP, queues=batched_app.QUEUE)


def _statuses(batched_app: Any, run_id: str) -> dict[int, str]:
    return {
        row.item: row.status for row in batched_app.durable.runtime.store.fanout.list_items(run_id)
    }


def test_a_sigkill_mid_batch_reruns_only_the_items_not_recorded(
    batched_app: Any, start_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    gate = Path(f"{log}.gate")
    gate.touch()  # item 6 holds until the gate goes
    doomed = _start(start_worker, batched_app, "doomed")
    handle = batched_app.logged_map.delay(log, 8, 8, hold=6)

    def recorded_and_held() -> set[int] | None:
        recorded = {n for n, s in _statuses(batched_app, handle.id).items() if s == "ok"}
        return recorded if recorded and 6 in batched_app.executions(log) else None

    # Items 0-5 are slow: the batch passes a lease beat and records what it ran.
    recorded = wait_until(recorded_and_held, 60, message="a beat's records, then item 6")
    doomed.kill()  # SIGKILL of the whole worker, mid-batch
    ran_before = set(batched_app.executions(log))
    assert recorded < ran_before  # some items ran but were never recorded
    gate.unlink()
    _start(start_worker, batched_app, "heir")
    assert handle.get(timeout=90) == [n * 10 for n in range(8)]  # input order
    runs = Counter(batched_app.executions(log))
    assert {n: runs[n] for n in recorded} == dict.fromkeys(recorded, 1)  # never again
    assert {n: runs[n] for n in ran_before - recorded} == dict.fromkeys(ran_before - recorded, 2)
    assert {n: runs[n] for n in set(range(8)) - ran_before} == dict.fromkeys(
        set(range(8)) - ran_before, 1
    )


def test_a_sigkill_before_the_first_beat_runs_the_whole_batch_again(
    batched_app: Any, start_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    gate = Path(f"{log}.gate")
    gate.touch()  # item 0 holds: the batch's open transaction has recorded nothing yet
    doomed = _start(start_worker, batched_app, "doomed")
    handle = batched_app.logged_map.delay(log, 3, 3, hold=0)
    wait_until(lambda: 0 in batched_app.executions(log), 60, message="item 0 to start")
    # Nothing is written while the batch runs open: its items are as dispatched.
    assert set(_statuses(batched_app, handle.id).values()) == {"pending"}
    doomed.kill()
    gate.unlink()
    # Redelivered at once (RabbitMQ) or published again after the dispatch grace (Redis).
    _start(start_worker, batched_app, "heir")
    assert handle.get(timeout=90) == [0, 10, 20]
    assert Counter(batched_app.executions(log)) == {0: 2, 1: 1, 2: 1}
    attempts = {
        row.item: row.attempts
        for row in batched_app.durable.runtime.store.fanout.list_items(handle.id)
    }
    assert attempts == {0: 1, 1: 1, 2: 1}  # the rolled-back run was not recorded


@pytest.mark.parametrize("exceptions", [True, False])
def test_batch_items_retry_then_succeed_or_fail_for_good(
    batched_app: Any, start_worker: Any, tmp_path: Path, exceptions: bool
) -> None:
    _start(start_worker, batched_app, "w")
    log = str(tmp_path / "runs.log")
    handle = batched_app.logged_map.delay(log, 6, 3, failures=1, broken=4, exceptions=exceptions)
    if exceptions:
        assert handle.get(timeout=60) == [0, 10, 20, 30, "builtins.ValueError", 50]
    else:
        with pytest.raises(WorkflowFailed) as failed:
            handle.get(timeout=60)
        assert failed.value.error_type == "celery_durable.errors.StepFailed"
        assert "item 4" in failed.value.error_message
        assert "ValueError: item 4 is broken" in failed.value.error_message
    runs = Counter(batched_app.executions(log))
    # Item 1 failed twice and succeeded on its third attempt; item 4 used all three.
    assert runs == {0: 1, 1: 3, 2: 1, 3: 1, 4: 3, 5: 1}
    attempts = {
        row.item: row.attempts
        for row in batched_app.durable.runtime.store.fanout.list_items(handle.id)
    }
    assert attempts[1] == 3 and attempts[4] == 3


def test_cancelling_the_parent_mid_batch_runs_no_more_of_its_items(
    batched_app: Any, start_worker: Any, tmp_path: Path
) -> None:
    _start(start_worker, batched_app, "w")
    log = str(tmp_path / "runs.log")
    gate = Path(f"{log}.gate")
    gate.touch()
    handle = batched_app.logged_map.delay(log, 6, 6, hold=1)
    wait_until(lambda: 1 in batched_app.executions(log), 60, message="item 1 to start")
    handle.cancel()
    wait_until(lambda: handle.status() is WorkflowStatus.CANCELLED, 30, message="cancelled")
    gate.unlink()

    def settled() -> dict[int, str] | None:
        statuses = _statuses(batched_app, handle.id)
        # A first delivery's items stay "pending" while its open transaction runs them.
        return statuses if not {"pending", "running"} & set(statuses.values()) else None

    statuses = wait_until(settled, 30, message="the batch to stop")
    # The running item finishes and records; the rest never run.
    assert statuses == {0: "ok", 1: "ok", 2: "cancelled", 3: "cancelled", 4: "cancelled",
                        5: "cancelled"}  # fmt: skip
    assert batched_app.executions(log) == [0, 1]
    with pytest.raises(WorkflowCancelled):
        handle.get(timeout=10)


def test_revoking_a_batch_task_id_revokes_its_items(
    batched_app: Any, start_worker: Any, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    gate = Path(f"{log}.gate")
    gate.touch()
    # One pool process: while item 0 holds it, the batch of items 2-3 waits for its turn.
    start_worker("w", app=APP, queues=batched_app.QUEUE, concurrency=1)
    handle = batched_app.logged_map.delay(log, 4, 2, hold=0, exceptions=True)
    wait_until(lambda: 0 in batched_app.executions(log), 60, message="item 0 to start")
    batched_app.app.control.revoke(item_task_id(handle.id, 0, 2, 2))  # "<run>:0:2-3"
    wait_until(
        lambda: [_statuses(batched_app, handle.id)[n] for n in (2, 3)] == ["revoked"] * 2,
        30,
        message="items 2 and 3 revoked",
    )
    gate.unlink()
    revoked = "celery.exceptions.TaskRevokedError"
    assert handle.get(timeout=60) == [0, 10, revoked, revoked]
    assert batched_app.executions(log) == [0, 1]  # the revoked batch never ran
