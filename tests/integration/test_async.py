"""async def workflows on a real prefork worker (each pool process runs its bodies on a
loop of its own, reused across deliveries): gathered steps, and a SIGKILL mid-gather
after which the replay runs only the step that was not recorded."""

from __future__ import annotations

from celery_durable import WorkflowStatus
from tests.support.services import effects


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
