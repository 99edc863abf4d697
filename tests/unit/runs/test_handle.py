"""WorkflowHandle as Celery's AsyncResult (runs/handle.py), on the embedded default: state,
result, traceback, get(propagate=False), revoke and forget read and steer the store."""

from __future__ import annotations

import pytest
from celery.result import AsyncResult

import celery_durable as cd
from celery_durable import WorkflowCancelled, WorkflowFailed


def test_a_handle_is_an_async_result_of_the_run(durable):
    @durable.workflow
    def doubled(n: int) -> int:
        return 2 * n

    @durable.workflow(max_attempts=1)
    def declined() -> None:
        raise ValueError("card declined")

    done = doubled.delay(4)
    assert isinstance(done, AsyncResult) and done.task_id == done.id
    assert (done.state, done.result, done.info, done.traceback) == ("SUCCESS", 8, 8, None)
    assert done.ready() and done.successful() and not done.failed()
    failed = declined.delay()
    assert (failed.state, failed.failed(), failed.successful()) == ("FAILURE", True, False)
    assert isinstance(failed.result, WorkflowFailed) and "ValueError" in (failed.traceback or "")
    error = failed.get(propagate=False)
    assert isinstance(error, WorkflowFailed) and error.error_message == "card declined"
    with pytest.raises(WorkflowFailed, match="card declined"):
        failed.get(timeout=5, no_ack=True, disable_sync_subtasks=False)  # Celery's options


def test_revoke_cancels_a_waiting_run_and_leaves_a_finished_one(durable):
    @durable.workflow
    def approval() -> object:
        return cd.wait_for_signal("approved")

    waiting = approval.delay()
    assert (waiting.state, waiting.ready(), waiting.result) == ("WAITING", False, None)
    waiting.revoke()
    assert waiting.state == "REVOKED" and isinstance(waiting.result, WorkflowCancelled)
    waiting.revoke()  # already finished: nothing to do, as for a finished task
    waiting.forget()  # no result backend: nothing to remove
    assert waiting.state == "REVOKED"
