"""Workflows in Celery's canvas, with a Redis result backend and a real worker: chains
across a wait, link and link_error, groups, ``app.AsyncResult`` of every state, and an
async def workflow chained and started by name.

The plain tasks of tests/apps/canvas.py note each call in Redis (``seen:<tag>``), so each
test checks how many times a callback ran, with what, and under which parent and root ids.
"""

from __future__ import annotations

import pytest
from celery import Celery, chain, chord, group
from celery.exceptions import TaskRevokedError

from celery_durable import WorkflowStatus
from tests.support.canvas import seen
from tests.support.services import BROKER_URL, REDIS_URL
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("canvas_worker")


def test_a_chain_runs_its_next_task_once_with_the_final_result_after_a_signal(canvas_app, rds, key):
    canvas = canvas_app
    result = chain(canvas.add.s(1, 2), canvas.approval.s(key), canvas.record.s(key)).apply_async()
    run_id = result.parent.id  # the run exists once `add` has applied it
    store = canvas.durable.runtime.store
    wait_until(lambda: store.get_status(run_id) == "WAITING", 60, message="the wait")
    handle = canvas.durable.get_handle(run_id)
    assert seen(rds, key) == []  # the chain's next task waits for the run, not the message
    assert canvas.app.AsyncResult(run_id).state == "WAITING"
    handle.signal("approved", 4)
    assert result.get(timeout=60) == 3 * 2 + 4
    assert handle.get(timeout=5) == 10
    [entry] = wait_until(lambda: seen(rds, key), 10)
    # Linked as Celery links a chain: its parent is the run, its root the chain's first.
    assert entry == {"value": 10, "parent_id": run_id, "root_id": result.parent.parent.id}
    assert canvas.app.AsyncResult(run_id).get(timeout=5) == 10


def test_link_fires_on_success_and_link_error_on_failure_and_on_cancel(canvas_app, rds, key):
    canvas = canvas_app
    link, errors = canvas.record.s(f"{key}-ok"), canvas.errback.s(f"{key}-err")
    succeeded = canvas.tagged.apply_async((5, key), link=link, link_error=errors)
    failed = canvas.failing.apply_async((key,), link=link, link_error=errors)
    waiting = canvas.approval.apply_async((1, key), link=link, link_error=errors)
    assert succeeded.get(timeout=60) == {"value": 10, "tag": key}
    wait_until(lambda: waiting.status() is WorkflowStatus.WAITING, 60, message="the wait")
    waiting.revoke()
    assert waiting.state == "REVOKED"
    wait_until(lambda: failed.ready(), 60, message="the failure")
    errored = wait_until(lambda: (e := seen(rds, f"{key}-err")) and len(e) == 2 and e, 30)
    assert sorted((e["task_id"], e["error"]) for e in errored) == sorted(
        [(failed.id, "KeyError"), (waiting.id, "WorkflowCancelled")]
    )
    ok = seen(rds, f"{key}-ok")
    assert [e["value"] for e in ok] == [{"value": 10, "tag": key}]
    assert ok[0]["parent_id"] == succeeded.id


def test_async_result_reads_every_state_from_the_backend(canvas_app, rds, key):
    canvas = canvas_app
    rds.set(f"hold:{key}:3", "1")
    running = canvas.square.delay(3, key)
    wait_until(lambda: rds.get(f"squares:{key}:3"), 60, message="the step")
    backend = canvas.app.AsyncResult(running.id)
    assert (backend.state, running.state) == ("STARTED", "STARTED")  # task_track_started
    rds.delete(f"hold:{key}:3")
    assert backend.get(timeout=60) == 9 and backend.successful()
    assert (running.state, running.result, running.ready()) == ("SUCCESS", 9, True)

    failed = canvas.failing.delay(key)
    with pytest.raises(KeyError, match=f"no order for {key}"):
        canvas.app.AsyncResult(failed.id).get(timeout=60)
    assert failed.failed() and failed.state == "FAILURE"
    assert "KeyError" in canvas.app.AsyncResult(failed.id).traceback
    assert failed.traceback and "KeyError" in failed.traceback

    waiting = canvas.approval.delay(1, key)
    wait_until(lambda: canvas.app.AsyncResult(waiting.id).state == "WAITING", 60)
    assert waiting.state == "WAITING" and not waiting.ready()
    waiting.cancel("not needed")
    with pytest.raises(TaskRevokedError):
        canvas.app.AsyncResult(waiting.id).get(timeout=30)
    assert waiting.state == "REVOKED"
    waiting.forget()
    assert canvas.app.AsyncResult(waiting.id).state == "PENDING"  # gone from the backend


def test_a_group_of_workflows_is_joined_through_the_backend(canvas_app, key):
    canvas = canvas_app
    joined = group(canvas.tagged.s(n, key) for n in range(3)).apply_async()
    assert joined.get(timeout=60) == [{"value": 2 * n, "tag": key} for n in range(3)]


def test_a_child_workflow_s_link_fires_when_the_child_settles(canvas_app, rds, key):
    canvas = canvas_app
    handle = canvas.parent.delay(key)
    assert handle.get(timeout=60) == 10
    [entry] = wait_until(lambda: seen(rds, f"{key}-child"), 30)
    child = canvas.durable.get_handle(entry["parent_id"]).record()
    assert (child.parent_id, entry["value"]) == (handle.id, {"value": 10, "tag": key})


def test_a_workflow_is_a_chord_s_body_after_plain_tasks_and_after_workflows(canvas_app, key):
    canvas = canvas_app
    plain_header = chord([canvas.add.s(n, n) for n in range(4)], canvas.summed.s(key))
    workflow_header = chord([canvas.square.s(n, key) for n in range(4)], canvas.summed.s(key))
    after_plain, after_workflows = plain_header.apply_async(), workflow_header.apply_async()
    assert after_plain.get(timeout=60) == sum(2 * n for n in range(4))
    assert after_workflows.get(timeout=60) == sum(n * n for n in range(4))
    body = canvas.durable.get_handle(after_workflows.id)  # the body is a run of its own
    assert body.status() is WorkflowStatus.SUCCEEDED and body.get() == 14


def test_an_async_workflow_in_a_chain_and_started_by_name(canvas_app, rds, key):
    """An async def workflow is a task of the canvas like any other: chained, and started
    by name by an app without its code."""
    canvas = canvas_app
    steps = canvas.add.s(1, 2), canvas.async_square.s(key), canvas.record.s(key)
    result = chain(*steps).apply_async()
    assert result.get(timeout=60) == 9
    run_id = result.parent.id
    assert canvas.durable.get_handle(run_id).get(timeout=5) == 9
    [entry] = wait_until(lambda: [e for e in seen(rds, key) if "value" in e], 10)
    assert entry["value"] == 9 and entry["parent_id"] == run_id

    bare = Celery("bare", broker=BROKER_URL, backend=REDIS_URL)
    try:
        sent = bare.send_task(canvas.async_square.name, args=[5, key], queue=canvas.QUEUE)
        assert sent.get(timeout=60) == 25
        assert canvas.durable.get_handle(sent.id).record().name == canvas.async_square.name
    finally:
        bare.close()
