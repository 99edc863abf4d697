"""Crash windows: a real worker killed (or failing) at each named fault point of the engine.

The test app arms a point per run (``fault:<run id>`` in Redis); the pool process
that reaches it SIGKILLs itself or raises. Each test checks the run still ends correctly
and that no step whose record committed runs again (side effects counted in Redis).
"""

from __future__ import annotations

import re

import pytest

from celery_durable import WorkflowCancelled, WorkflowStatus
from celery_durable.core import faults
from tests.support.faults import arm, fired
from tests.support.services import effects
from tests.support.waiting import wait_until


@pytest.mark.parametrize("action", ["kill", "raise"])
@pytest.mark.parametrize(
    ("point", "step"),
    [(faults.AFTER_CLAIM, None), (faults.AFTER_RECORD_STEP, 2), (faults.AFTER_SETTLE, None)],
)
def test_fault_in_the_step_path_loses_and_repeats_nothing(
    basic_app, start_worker, key, rds, point, step, action
):
    start_worker()
    run_id = f"fault-{key}"
    arm(rds, run_id, point, action, step)
    handle = basic_app.five_steps.apply_async(args=(key,), run_id=run_id)
    assert handle.get(timeout=90) == [10, 20, 30, 40, 50]
    # after_settle fires after the commit that get() waits for: wait for the hook too.
    wait_until(lambda: fired(rds, run_id, point), 30, message="the fault to fire")
    # Every step ran exactly once: a committed record is never run again.
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5


@pytest.mark.parametrize("action", ["kill", "raise"])
def test_fault_between_a_step_failure_and_its_retry_still_retries_the_step(
    basic_app, start_worker, key, rds, action
):
    """Bug: the error row was committed before the retry was scheduled, so a crash in
    between made the next attempt replay it as a caught failure and end FAILED."""
    start_worker()
    run_id = f"retry-{key}"
    arm(rds, run_id, faults.BEFORE_SCHEDULE_RETRY, action)
    handle = basic_app.retried_step.apply_async(args=(key,), run_id=run_id)
    assert handle.get(timeout=90) == "second call ok"
    assert fired(rds, run_id, faults.BEFORE_SCHEDULE_RETRY)
    assert effects(rds, key, "fails_once") == 2  # the failed step ran again, once


@pytest.mark.parametrize("point", [faults.AFTER_SUSPEND, faults.AFTER_CONSUME_SIGNAL])
def test_fault_around_a_wait_keeps_the_signal_and_the_steps(
    basic_app, start_worker, key, rds, point
):
    start_worker()
    run_id = f"wait-{key}"
    arm(rds, run_id, point, "kill")
    handle = basic_app.signalled_steps.apply_async(args=(key,), run_id=run_id)
    if point == faults.AFTER_SUSPEND:
        wait_until(lambda: fired(rds, run_id, point), 60, message="the fault to fire")
        wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="WAITING")
    else:
        wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="WAITING")
    assert handle.signal("go", {"n": 7})
    assert handle.get(timeout=90) == [10, {"n": 7}, 20]
    assert fired(rds, run_id, point)
    assert effects(rds, key, "s1") == 1 and effects(rds, key, "s2") == 1
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    assert steps[1].output == '{"n":7}'


def test_a_body_that_swallows_its_cancellation_still_ends_cancelled(
    basic_app, shared_worker, key, rds
):
    """Bug: a bare except around a step let a cancelled run return and end SUCCEEDED."""
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.swallows_cancel.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    handle.cancel(reason="swallowed")
    rds.delete(f"block:{key}:s1")
    with pytest.raises(WorkflowCancelled, match="swallowed"):
        handle.get(timeout=30)
    assert handle.status() is WorkflowStatus.CANCELLED
    assert handle.record().result is None
    assert effects(rds, key, "s2") == 0  # told to stop: no further step ran


def test_a_worker_paused_past_its_lease_runs_no_step_after_it_wakes(
    basic_app, start_worker, key, rds
):
    """Chaos finding: a pool process paused (SIGSTOP) past its lease woke up and ran the
    next step, which the new owner had already recorded. It now confirms its lease before
    a step's side effects when the heartbeat hasn't extended it lately."""
    import os
    import signal

    start_worker()
    run_id = f"paused-{key}"
    arm(rds, run_id, faults.AFTER_RECORD_STEP, "stop", 2)
    handle = basic_app.five_steps.apply_async(args=(key,), run_id=run_id)
    paused = int(wait_until(lambda: rds.get(f"stopped:{run_id}"), 60, message="the pause"))
    try:
        # The other pool process takes the run over once the lease runs out.
        assert handle.get(timeout=90) == [10, 20, 30, 40, 50]
    finally:
        os.kill(paused, signal.SIGCONT)
    # The woken process finishes its delivery (whichever worker it belongs to: the
    # module's shared worker consumes the same queue) without running another step.
    wait_until(
        lambda: rds.get(f"postrun:{run_id}:{paused}"),
        30,
        message="the woken process to end its delivery",
    )
    assert [effects(rds, key, f"s{n}") for n in range(1, 6)] == [1] * 5
    assert handle.record().recoveries == 1


@pytest.mark.parametrize("action", ["kill", "raise"])
def test_crash_between_dispatch_and_recording_dispatches_nothing_twice(
    basic_app, start_worker, key, rds, action
):
    """The fault fires after the first batch (500 items) of a 600-item map is published:
    the body never got to wait for them. Replay finds the fan-out recorded and dispatches
    nothing again; the unpublished 100 items are published by the sweeper."""
    from tests.conftest import GPU_QUEUE

    start_worker.together({}, {"name": "gpu", "queues": GPU_QUEUE})
    run_id = f"dispatch-{key}"
    arm(rds, run_id, faults.AFTER_DISPATCH, action, 0)
    handle = basic_app.rendered.apply_async(args=(key, 600), run_id=run_id)
    assert handle.get(timeout=240) == [f"page-{n}" for n in range(600)]
    assert fired(rds, run_id, faults.AFTER_DISPATCH)
    assert [effects(rds, key, f"render{n}") for n in range(600)] == [1] * 600
    rows = basic_app.durable.runtime.store.fanout.list_items(handle.id)
    assert len(rows) == 600 and {r.status for r in rows} == {"ok"}
    assert list(basic_app.durable.runtime.store.load_steps(handle.id)) == [0]
    # Killed: a lost worker, recovered. Raised: a failed attempt, retried.
    record = handle.record()
    assert (record.recoveries, record.attempts) == ((1, 1) if action == "kill" else (0, 2))


def test_a_lost_wake_up_is_published_by_the_sweeper(
    basic_app, shared_worker, start_worker, key, rds
):
    """The item task dies right after the transaction that recorded the last item and
    woke the parent, before it published the parent's message: the run is PENDING with
    no message, and the sweeper publishes it after the dispatch grace."""
    from tests.conftest import GPU_QUEUE

    workers = start_worker.together({}, {"name": "gpu", "queues": GPU_QUEUE})
    run_id = f"wake-{key}"
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.apply_async(args=(key, 1, 0), run_id=run_id)
    wait_until(lambda: handle.status() is WorkflowStatus.WAITING, 60, message="the wait")
    wait_until(lambda: rds.get(f"started:{key}:render"), 60, message="the item to start")
    arm(rds, run_id, faults.AFTER_RECORD_ITEM, "kill", 0)
    rds.delete(f"block:{key}:render")
    assert handle.get(timeout=90) == ["page-0"]
    assert fired(rds, run_id, faults.AFTER_RECORD_ITEM)
    assert effects(rds, key, "render0") == 1  # recorded once; its redelivery did not run
    # Published by a sweep, not by the item task (a claim resets the run's dispatches).
    # Any live worker's sweeper may take it: the module's shared worker sweeps too.
    swept = re.compile(rf"(dispatched|woke) workflow \S+ run {run_id}\b")
    assert any(swept.search(worker.log()) for worker in [shared_worker, *workers])
