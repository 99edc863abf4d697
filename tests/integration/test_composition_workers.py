"""Composition end to end on workers of the test's own: a gpu worker SIGKILLed with items
running, a map that waits because no worker consumes the routed steps' queue (GPU_QUEUE) yet,
a parent cancelled while its items are pending. The rest is in test_composition.py, on the
module's shared workers.
"""

from __future__ import annotations

import signal

import pytest

from celery_durable import WorkflowCancelled, WorkflowStatus
from tests.conftest import GPU_QUEUE
from tests.support.builders import item_rows, recorded_items
from tests.support.services import effects
from tests.support.waiting import wait_until


def test_sigkilled_gpu_worker_loses_nothing_and_repeats_no_recorded_item(
    basic_app, start_worker, key, rds
):
    """Items 10+ block while the flag is set: the gpu worker is SIGKILLed (main process and
    pool children) with items running and others queued, then started again."""
    _, gpu = start_worker.together({"name": "default"}, {"name": "gpu-a", "queues": GPU_QUEUE})
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.delay(key, 50, 10)
    wait_until(lambda: rds.get(f"started:{key}:render"), 60, message="a held item to start")
    wait_until(
        lambda: len(recorded_items(basic_app, handle.id)) >= 10,
        60,
        message="items 0-9 to be recorded",
    )
    gpu.kill()
    before = recorded_items(basic_app, handle.id)
    assert before >= set(range(10))
    rds.delete(f"block:{key}:render")
    start_worker("gpu-b", queues=GPU_QUEUE)
    assert handle.get(timeout=120) == [f"page-{n}" for n in range(50)]
    assert handle.status() is WorkflowStatus.SUCCEEDED
    counts = [effects(rds, key, f"render{n}") for n in range(50)]
    assert all(counts[n] == 1 for n in before), counts  # recorded: never ran again
    assert all(count >= 1 for count in counts), counts
    assert any(count == 2 for count in counts), counts  # those cut off ran again


def test_cold_shutdown_gives_a_running_item_back_at_once(basic_app, start_worker, key, rds):
    """Bug: an item that had run a beat (its open transaction traded for a lease) was left
    to that lease's expiry by a cold shutdown, and a claimed item was too: the pool child
    never saw the worker's shutdown flags."""
    default, gpu = start_worker.together(
        {"name": "default"}, {"name": "gpu-cold", "queues": GPU_QUEUE}
    )
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.delay(key, 1, 0)
    wait_until(lambda: rds.get(f"started:{key}:render"), 60, message="the item to start")
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="the map to wait")
    # Its attempt is visible once the heartbeat has committed the claim (a lease).
    wait_until(
        lambda: item_rows(basic_app, handle.id)[0].attempts == 1, 60, message="the item's lease"
    )
    default.kill()  # its sweeper would reset the item once the lease lapsed, release or not
    gpu.proc.send_signal(signal.SIGQUIT)
    gpu.wait_exit(30)
    (row,) = item_rows(basic_app, handle.id)
    assert (row.status, row.attempts) == ("pending", 0), row
    assert f"of run {handle.id} interrupted by a terminate signal" in gpu.log()
    rds.delete(f"block:{key}:render")
    start_worker.together({"name": "default-after"}, {"name": "gpu-after", "queues": GPU_QUEUE})
    assert handle.get(timeout=120) == ["page-0"]
    assert effects(rds, key, "render0") == 2


def test_a_workflow_waiting_on_a_map_holds_no_worker_slot(basic_app, start_worker, key, rds):
    start_worker("one-slot", concurrency=1)
    waiting = basic_app.rendered.delay(key, 100)  # items on the gpu queue: nobody there yet
    wait_until(lambda: waiting.status() is WorkflowStatus.WAITING, 60, message="the map to suspend")
    record = waiting.record()
    assert record.owner is None and record.wait_items  # no lease, no slot
    other = basic_app.five_steps.delay(key)
    assert other.get(timeout=60) == [10, 20, 30, 40, 50]  # ran in the one slot meanwhile
    assert waiting.status() is WorkflowStatus.WAITING
    start_worker("gpu", queues=GPU_QUEUE)
    assert waiting.get(timeout=120) == [f"page-{n}" for n in range(100)]


def test_cancelling_a_parent_cancels_its_running_child_and_pending_items(
    basic_app, start_worker, key, rds
):
    start_worker("default")  # no gpu worker: the 20 items stay pending
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.parent_with_work.apply_async(args=(key,), run_id=f"pc-{key}")
    wait_until(lambda: rds.get(f"started:{key}:s1"), 60, message="the child to run")
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="parent waits")
    child = basic_app.durable.get_handle(f"pc-{key}:0")
    assert child.status() is WorkflowStatus.RUNNING
    assert handle.cancel("stop everything") is WorkflowStatus.CANCELLED
    rows = item_rows(basic_app, handle.id)
    assert {r.status for r in rows if r.child_id is None} == {"cancelled"}
    rds.delete(f"block:{key}:s1")
    with pytest.raises(WorkflowCancelled, match="stop everything"):
        child.get(timeout=60)  # stopped at its next step
    assert effects(rds, key, "s2") == 0
    gpu = start_worker("gpu", queues=GPU_QUEUE)  # the items' messages arrive: none runs
    wait_until(
        lambda: gpu.log().count(f"of run {handle.id} not claimed") >= 20,
        60,
        message=lambda: f"the 20 messages to be acknowledged:\n{gpu.log()[-3000:]}",
    )
    assert sum(effects(rds, key, f"render{n}") for n in range(20)) == 0
    with pytest.raises(WorkflowCancelled):
        handle.get(timeout=5)
