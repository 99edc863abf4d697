"""Revoke means cancel: `celery control revoke` and Flower's Revoke button cancel the run
durably, whatever state it is in (the worker's sweeper reads its revoked set)."""

from __future__ import annotations

import pytest

from celery_durable import WorkflowCancelled, WorkflowStatus
from tests.support.cli import revoke_by_cli
from tests.support.services import effects
from tests.support.waiting import wait_until


def cancelled(handle) -> bool:  # type: ignore[no-untyped-def]
    return handle.status() is WorkflowStatus.CANCELLED


def test_revoking_a_waiting_run_cancels_it(basic_app, shared_worker, key):
    handle = basic_app.collector.delay(key, 2)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    revoke_by_cli(handle.id)
    wait_until(lambda: cancelled(handle), 30, message="the revoke to cancel the run")
    with pytest.raises(WorkflowCancelled, match="revoked"):
        handle.get(timeout=5)


def test_revoking_a_running_run_cancels_it_at_its_next_step(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    revoke_by_cli(handle.id)
    wait_until(lambda: handle.record().cancel_requested, 30, message="the cancel request")
    rds.delete(f"block:{key}:s1")
    wait_until(lambda: cancelled(handle), 30, message="the run to stop")
    assert effects(rds, key, "s2") == 0


def test_revoking_a_pending_run_cancels_it_before_it_starts(basic_app, shared_worker, key, rds):
    handle = basic_app.five_steps.apply_async(args=(key,), countdown=30)
    revoke_by_cli(handle.id)
    wait_until(lambda: cancelled(handle), 30, message="the revoke to cancel the run")
    assert effects(rds, key, "s1") == 0


def test_flowers_revoke_button_cancels_the_run(basic_app, shared_worker, flower, key):
    handle = basic_app.collector.delay(key, 2)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 30, message="WAITING")
    answer = flower.api("POST", f"/api/task/revoke/{handle.id}")
    assert handle.id in answer["message"]
    wait_until(lambda: cancelled(handle), 30, message="Flower's revoke to cancel the run")
    assert handle.record().cancel_reason == "revoked (celery control revoke)"


def test_revoke_with_terminate_cancels_without_calling_it_a_failure(
    basic_app, shared_worker, key, rds
):
    """Bug: the SIGTERM that ``revoke(terminate=True)`` sends the pool child was settled as
    a failed attempt ("failed on attempt 1 of 3, retrying") before the cancel caught up."""
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.five_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    basic_app.app.control.revoke(handle.id, terminate=True)
    wait_until(lambda: cancelled(handle), 30, message="the revoke to cancel the run")
    rds.delete(f"block:{key}:s1")
    log = shared_worker.log()
    assert f"run {handle.id} interrupted by a terminate signal" in log
    assert f"run {handle.id} failed" not in log
    assert handle.record().cancel_reason == "revoked (celery control revoke)"
    assert effects(rds, key, "s2") == 0
