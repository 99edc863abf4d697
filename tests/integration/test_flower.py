"""Flower tells the truth: what a real Flower shows (its HTTP API) of workflows run by a real
worker started with -E. One task per run (the run id); a run that suspends (signal,
timer, items, child) is WAITING, never SUCCESS; a resumed run's line names the step it runs;
a duplicate delivery that did not run is not a success; a run that failed for good is
FAILURE with its exception; an item task is SUCCESS, RETRY or FAILURE as its step was; every
state carries the run's line in its result; a signal's wake-up says what it woke."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from celery_durable import WorkflowStatus
from celery_durable.engine.publish import item_task_id
from celery_durable.waits.signals import WAKE_TASK
from celery_durable.waits.wake import wake_outcome
from tests.conftest import GPU_QUEUE
from tests.support.flower import Flower
from tests.support.services import effects, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker


@pytest.fixture(scope="module")
def events_worker(basic_app: Any) -> Iterator[Worker]:
    """A worker that sends task events (-E), as Flower needs."""
    queues = f"{os.environ['TEST_QUEUE']},{GPU_QUEUE}"  # workflows and routed items
    worker = Worker("tests.apps.basic", {}, queues=queues, name=unique("ev"), extra=("-E",))
    worker.wait_ready()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def flower(basic_app: Any, events_worker: Worker) -> Iterator[Flower]:
    """Flower, once it captures events (probe runs show when it does)."""
    process = Flower("tests.apps.basic").wait_ready()
    process.capturing(lambda: basic_app.context_probe.delay(unique("probe")))
    yield process
    process.stop()


@pytest.fixture
def unblocked(key: str, rds: Any) -> Iterator[None]:
    """Release the test's held steps however it ends: a failed test must not leave a step
    holding one of the module worker's processes through the next tests."""
    yield
    for flag in rds.scan_iter(f"block:{key}*"):
        rds.delete(flag)


def task_info(flower: Flower, task_id: str) -> dict[str, Any] | None:
    return flower.task(task_id)


def shown(flower: Flower, task_id: str, state: str, *texts: str) -> dict[str, Any]:
    """Wait until Flower shows ``state`` for the task with each of ``texts`` in its result."""

    def matches() -> dict[str, Any] | None:
        info = task_info(flower, task_id)
        if info and info["state"] == state and all(t in str(info["result"]) for t in texts):
            return info
        return None

    return wait_until(
        matches,
        30,
        0.1,
        lambda: f"Flower to show {state} {texts}; it shows {task_info(flower, task_id)}",
    )


def wake_shown(flower: Flower, run_id: str, *texts: str) -> dict[str, Any]:
    """Wait until Flower shows a wake-up task of run ``run_id`` as a SUCCESS with each of
    ``texts`` in its result."""

    def matches() -> dict[str, Any] | None:
        tasks = flower.api("GET", f"/api/tasks?taskname={WAKE_TASK}")
        for info in tasks.values():
            result = str(info.get("result"))
            if (
                run_id in str(info.get("args"))
                and info["state"] == "SUCCESS"
                and all(t in result for t in texts)
            ):
                return dict(info)
        return None

    def shows() -> str:
        tasks = flower.api("GET", f"/api/tasks?taskname={WAKE_TASK}")
        mine = [(t["state"], t.get("result")) for t in tasks.values() if run_id in str(t["args"])]
        return f"Flower to show a wake-up of {run_id} with {texts}; it shows {mine}"

    return wait_until(matches, 30, 0.1, shows)


def test_a_suspended_run_is_waiting_then_resumed_then_a_success(
    basic_app, events_worker, flower, key, rds, unblocked
):
    handle = basic_app.signalled_steps.delay(key)
    line = f"run={handle.id} attempt=1"
    waiting = shown(flower, handle.id, "WAITING", "waiting for signal 'go'", f"{line} step=1")
    assert waiting["name"] == basic_app.signalled_steps.name  # one task name per workflow
    listed = flower.api("GET", "/api/tasks?state=WAITING")
    assert listed[handle.id]["state"] == "WAITING"

    rds.set(f"block:{key}:s2", "1")
    handle.signal("go", "payload")
    # The line names the step the run is on (step 2, blocked), not the wait it left.
    after = "resumed after waiting at step 1 (celery_durable.signal:go)"
    shown(flower, handle.id, "RESUMED", after, f"{line} step=2 ({basic_app.numbered.name})]")
    rds.delete(f"block:{key}:s2")
    # The signal's wake-up task says what it woke.
    woke = wake_shown(flower, handle.id, f'woke run {handle.id}: it waited for signal "go"')
    assert woke["name"] == WAKE_TASK

    done = shown(flower, handle.id, "SUCCESS", "[10, 'payload', 20]", f"{line} steps=3")
    assert handle.get(timeout=10) == [10, "payload", 20]
    assert done["exception"] is None


def test_a_resumed_run_names_each_step_it_runs_not_the_timer_it_left(
    basic_app, events_worker, flower, key, rds, unblocked
):
    rds.set(f"block:{key}:s3", "1")
    rds.set(f"block:{key}:s4", "1")
    handle = basic_app.sleep_between_steps.delay(key)
    line = f"run={handle.id} attempt=1"
    step = basic_app.numbered.name
    after = "resumed after waiting at step 2 (celery_durable.sleep)"
    wait_until(lambda: rds.get(f"started:{key}:s3"), 30, message="step 3 to start")
    shown(flower, handle.id, "RESUMED", after, f"{line} step=3 ({step})]")
    rds.delete(f"block:{key}:s3")
    wait_until(lambda: rds.get(f"started:{key}:s4"), 30, message="step 4 to start")
    shown(flower, handle.id, "RESUMED", after, f"{line} step=4 ({step})]")
    rds.delete(f"block:{key}:s4")
    shown(flower, handle.id, "SUCCESS", "[10, 20, 30, 40]", f"{line} steps=5")


def test_a_wake_up_of_a_run_not_waiting_says_so(
    basic_app, events_worker, flower, key, rds, unblocked
):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.signalled_steps.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    handle.signal("go", "early")  # stored; the run takes it when it reaches its wait
    wake_shown(
        flower,
        handle.id,
        f'nothing to wake: run {handle.id} is RUNNING, not waiting for signal "go"',
        "the signal stays pending until the run waits for it",
    )
    rds.delete(f"block:{key}:s1")
    assert handle.get(timeout=30) == [10, "early", 20]
    # What a late or stray wake-up says (in-process: the same function, the same store).
    durable = basic_app.durable
    runtime = durable.runtime
    finished = wake_outcome(runtime, handle.id, "go")
    assert finished == f"nothing to wake: run {handle.id} is SUCCEEDED"
    assert wake_outcome(runtime, f"{key}-none", "go") == f"nothing to wake: no run {key}-none"
    other = basic_app.collector.delay(f"{key}-w", 1)  # waits for signal "item"
    wait_until(lambda: other.status() is WorkflowStatus.WAITING, 30, message="the wait")
    assert wake_outcome(runtime, other.id, "go").startswith(
        f'nothing to wake: run {other.id} is WAITING for "item", not waiting for signal "go"'
    )
    other.cancel("test over")


def test_a_duplicate_delivery_that_did_not_run_is_not_a_success(
    basic_app, events_worker, flower, key, rds
):
    durable = basic_app.durable
    # Early: a run whose start is 60 s away gets a stray message now.
    early = basic_app.five_steps.apply_async(args=(key,), countdown=60)
    run = early.record()
    durable.runtime.publish(run.id, run.name, run.args, run.queue)
    info = shown(flower, early.id, "SCHEDULED", "pending (due ", "did not run it")
    assert f"run={early.id} attempt=0" in info["result"]
    assert effects(rds, key, "s1") == 0 and early.status() is WorkflowStatus.PENDING

    # Waiting: a duplicate delivery of a suspended run restates WAITING.
    waiting = basic_app.collector.delay(f"{key}-w", 1)
    shown(flower, waiting.id, "WAITING", "waiting for signal 'item'")
    run = waiting.record()
    durable.runtime.publish(run.id, run.name, run.args, run.queue)
    info = shown(flower, waiting.id, "WAITING", "found the run WAITING and did not run it")
    assert f"run={waiting.id} attempt=1" in info["result"]
    early.cancel("test over")
    waiting.cancel("test over")


def test_a_run_that_failed_for_good_is_failure_with_its_exception(
    basic_app, events_worker, flower, key
):
    handle = basic_app.permanent.delay(key)
    info = shown(flower, handle.id, "FAILURE", "failed for good on attempt 1 of 3")
    assert "PermanentError" in info["exception"] and f"no way {key}" in info["exception"]
    assert f"no way {key}" in info["traceback"]
    assert f"run={handle.id} attempt=1" in info["result"]
    assert handle.status() is WorkflowStatus.FAILED


def test_a_retried_run_is_retry_with_the_next_attempt(basic_app, events_worker, flower, key):
    handle = basic_app.retried_later.delay(key)
    info = shown(flower, handle.id, "RETRY", "retry attempt 2 at ")
    assert f"retry me {key}" in info["exception"]
    assert f"run={handle.id} attempt=1 step=1" in info["result"]
    handle.cancel("test over")


def test_a_cancelled_run_is_cancelled_not_a_success(basic_app, events_worker, flower, key, rds):
    rds.set(f"block:{key}:s1", "1")
    handle = basic_app.cancellable.delay(key)
    wait_until(lambda: rds.get(f"started:{key}:s1"), 30, message="step 1 to start")
    handle.cancel("customer left")
    rds.delete(f"block:{key}:s1")
    info = shown(flower, handle.id, "CANCELLED", "cancelled: customer left")
    assert f"run={handle.id} attempt=1" in info["result"]


def test_a_run_waiting_for_its_items_is_waiting_and_each_item_tells_its_own_state(
    basic_app, events_worker, flower, key, rds
):
    rds.set(f"block:{key}:render", "1")
    handle = basic_app.rendered.delay(key, 2, 1)  # item 1 holds while the flag is set
    line = f"run={handle.id} attempt=1"
    shown(flower, handle.id, "WAITING", "waiting for the items of step(s) 0", f"{line} step=0")
    render = basic_app.render.name
    done = shown(flower, item_task_id(handle.id, 0, 0), "SUCCESS", "'page-0'")
    assert done["name"] == render  # items show under their step's task name
    assert f"[run={handle.id} attempt=1 step=0 ({render}) item=0]" in done["result"]
    rds.delete(f"block:{key}:render")
    shown(flower, handle.id, "SUCCESS", "['page-0', 'page-1']", f"{line} steps=1")

    # An item that fails is RETRY while it backs off, then FAILURE with its exception;
    # its run, which handles the failure, is a SUCCESS.
    picky = basic_app.picky_map.delay(key, 4, True)
    failed = shown(flower, item_task_id(picky.id, 0, 3), "FAILURE")
    assert "item 3 refused" in failed["exception"]
    shown(flower, picky.id, "SUCCESS", "'type': 'builtins.ValueError', 'item': 3")

    # A child that fails for good fails the parent that doesn't handle it: both FAILURE.
    parent = basic_app.unhandled_child_failure.delay(key)
    info = shown(flower, parent.id, "FAILURE", "failed for good")
    assert f"child of {key} failed" in info["exception"]
