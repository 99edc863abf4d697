"""async def workflows on a real prefork worker (each pool process runs its bodies on a
loop of its own, reused across deliveries): gathered steps, a SIGKILL mid-gather after
which the replay runs only the step that was not recorded, the awaited body API (a plain
step, a timer, a signal, a child), a wait never awaited, and a cancel that interrupts the
step being awaited."""

from __future__ import annotations

import pytest

from celery_durable import WorkflowFailed, WorkflowStatus
from tests.support.services import effects
from tests.support.waiting import wait_until


def test_an_async_workflow_gathers_its_steps_on_a_worker(basic_app, shared_worker, key, rds):
    handle = basic_app.gathers.delay(key, 5)
    assert handle.get(timeout=30) == [0, 10, 20, 30, 40, 50]
    assert handle.status() is WorkflowStatus.SUCCEEDED
    assert [effects(rds, key, f"a{n}") for n in range(6)] == [1] * 6
    steps = basic_app.durable.runtime.store.load_steps(handle.id)
    # Each gathered call is recorded under the index it took when called.
    assert {idx: step.output for idx, step in steps.items()} == {n: str(n * 10) for n in range(6)}


def test_a_sigkill_mid_gather_runs_only_the_unrecorded_step_again(
    basic_app, start_worker, key, rds
):
    start_worker("async-kill")
    handle = basic_app.gathers_then_dies.delay(key)
    assert handle.get(timeout=90) == [10, 20, "survived"]
    assert effects(rds, key, "killer") == 2  # killed once, then ran to its end
    assert (effects(rds, key, "a1"), effects(rds, key, "a2")) == (1, 1)  # replayed
    assert handle.record().recoveries == 1


def test_an_async_body_awaits_a_plain_step_a_timer_a_signal_and_a_child(
    basic_app, shared_worker, key, rds
):
    handle = basic_app.waits_in_an_async_body.delay(key)

    def waits_for_approval() -> bool:
        steps = handle.steps()
        return handle.status() is WorkflowStatus.WAITING and any(
            s.name.endswith("approve") for s in steps
        )

    wait_until(waits_for_approval, 30, message="the run to wait for 'approve' after its timer")
    assert handle.signal("approve", "yes")
    assert handle.get(timeout=30) == {"plain": 70, "approval": "yes", "child": [0, 10, 20]}
    assert effects(rds, key, "s7") == 1  # the plain step ran once, replayed after each wait
    child = basic_app.durable.get_handle(f"{handle.id}:3")
    assert child.record().parent_id == handle.id


def test_a_wait_never_awaited_fails_the_run_naming_it(basic_app, shared_worker, key, rds):
    handle = basic_app.forgets_to_await.delay(key)
    with pytest.raises(WorkflowFailed, match=r"cd.sleep\(\) \(index 0\) was called but never"):
        handle.get(timeout=30)
    assert handle.status() is WorkflowStatus.FAILED  # not WAITING: the sleep never happened
    assert (effects(rds, key, "before"), effects(rds, key, "after")) == (1, 1)


def test_cancelling_a_run_interrupts_the_step_it_awaits(basic_app, shared_worker, key, rds):
    rds.set(f"block:{key}:long", "1")
    try:
        handle = basic_app.cancelled_at_an_await.delay(key)
        wait_until(lambda: rds.exists(f"started:{key}:long"), 30, message="the long step")
        assert handle.cancel("no longer wanted") is WorkflowStatus.RUNNING
        # The heartbeat (a third of the 3 s lease) finds the request and cancels the await,
        # while the step would still be awaiting its flag.
        wait_until(lambda: handle.status() is WorkflowStatus.CANCELLED, 30, message="cancel")
        assert effects(rds, key, "long-done") == 0
        assert [(s.idx, s.status) for s in handle.steps()] == [(0, "ok")]
    finally:
        rds.delete(f"block:{key}:long")
