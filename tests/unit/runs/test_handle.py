"""WorkflowHandle as Celery's AsyncResult (runs/handle.py), on the embedded default: state,
result, traceback, get(propagate=False), revoke and forget read and steer the store; its
async client (adelay, aget, ...) gives and raises what the sync calls do."""

from __future__ import annotations

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult

import celery_durable as cd
from celery_durable import WorkflowCancelled, WorkflowFailed
from tests.support.event_loop import run_apart


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


# -- the async client on the embedded default (SQLite: reads on a client thread, polling) ----


def test_the_async_client_gives_what_the_sync_one_gives(durable):
    @durable.workflow
    def approval(order: int) -> object:
        cd.set_state({"order": order}, "progress")
        return {"order": order, "decision": cd.wait_for_signal("approved")}

    async def client() -> None:
        handle = await approval.adelay(7)
        assert isinstance(handle, cd.WorkflowHandle) and handle.name == approval.name
        assert await handle.astatus() is cd.WorkflowStatus.WAITING
        assert await handle.aquery("progress") == {"order": 7}
        assert await handle.aquery("progress", wait=5) == {"order": 7}
        same = await durable.aget_handle(handle.id)
        assert same == handle and same.name == approval.name
        assert await handle.asignal("approved", "yes", idempotency_key="once")
        assert not await handle.asignal("approved", "again", idempotency_key="once")
        assert await handle.aget(timeout=5) == {"order": 7, "decision": "yes"}
        assert await handle.astatus() is cd.WorkflowStatus.SUCCEEDED

        other = await approval.aapply_async((8,), run_id=f"{handle.id}-2")
        assert other.id == f"{handle.id}-2"
        assert isinstance(await durable.asend_signal(other.id, "approved", "by broker"), str)
        assert await other.aget(timeout=5) == {"order": 8, "decision": "by broker"}

        cancelled = await approval.adelay(9)
        assert await cancelled.acancel("no stock") is cd.WorkflowStatus.CANCELLED
        with pytest.raises(WorkflowCancelled, match="no stock"):
            await cancelled.aget(timeout=5)
        error = await cancelled.aget(timeout=5, propagate=False)
        assert isinstance(error, WorkflowCancelled)
        with pytest.raises(cd.WorkflowAlreadyCompleted):
            await cancelled.acancel()

    run_apart(client())


def test_the_async_client_raises_what_the_sync_one_raises(durable):
    @durable.workflow(max_attempts=1)
    def declined(n: int) -> None:
        raise ValueError(f"card declined {n}")

    @durable.workflow
    def waits() -> object:
        return cd.wait_for_signal("go")

    async def client() -> None:
        failed = await declined.adelay(1)
        with pytest.raises(WorkflowFailed, match="card declined 1") as raised:
            await failed.aget(timeout=5)
        assert raised.value.error_type == declined.delay(1).get(propagate=False).error_type
        waiting = await waits.adelay()
        with pytest.raises(CeleryTimeoutError, match=f"{waiting.id!r} did not finish"):
            await waiting.aget(timeout=0.2)
        with pytest.raises(CeleryTimeoutError, match="did not set 'missing'"):
            await waiting.aquery("missing", wait=0.2)
        with pytest.raises(cd.UnknownQuery):
            await waiting.aquery("missing")
        # Unknown runs: WorkflowNotFound naming the id, from every method.
        ghost = cd.WorkflowHandle(durable, "no-such-run")
        for call in (
            lambda: durable.aget_handle("no-such-run"),
            ghost.aget,
            ghost.astatus,
            ghost.aquery,
            ghost.acancel,
            lambda: ghost.asignal("go"),
        ):
            with pytest.raises(cd.WorkflowNotFound, match="no-such-run"):
                await call()
        # A bad start: the sync start's error, word for word, and no run.
        for bad in ({"priority": "high"}, {"if_exists": "maybe"}, {"countdown": "soon"}):
            with pytest.raises(Exception) as sync_error:
                waits.apply_async(run_id="refused", **bad)
            with pytest.raises(type(sync_error.value)) as async_error:
                await waits.aapply_async(run_id="refused", **bad)
            assert str(async_error.value) == str(sync_error.value)
        with pytest.raises(TypeError, match="waits"):
            await waits.adelay(1)
        assert durable.runtime.store.get_status("refused") is None
        with pytest.raises(cd.WorkflowAlreadyExists):
            await waits.aapply_async(run_id=waiting.id)
        assert await waits.aapply_async(run_id=waiting.id, if_exists="return") == waiting

    run_apart(client())
