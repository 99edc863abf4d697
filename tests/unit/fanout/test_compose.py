"""Composition on the embedded default: SQLite store, Celery in eager mode. Fan-outs,
remote steps and children run in-process, so a user can unit-test such workflows."""

from __future__ import annotations

import datetime as dt

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

import celery_durable as cd
from celery_durable import (
    NonDeterminismError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowStatus,
)
from tests.support.flaky_map import flaky_map
from tests.support.waiting import wait_until


def test_map_runs_one_task_per_item_in_input_order(durable):
    calls: list[int] = []

    @durable.step(queue="gpu")
    def square(n: int) -> int:
        calls.append(n)
        return n * n

    @durable.workflow
    def squares(count: int) -> list[int]:
        return cd.map(square, range(count))

    handle = squares.delay(7)
    assert handle.get(timeout=5) == [0, 1, 4, 9, 16, 25, 36]
    assert sorted(calls) == list(range(7))
    steps = durable.runtime.store.load_steps(handle.id)
    assert steps[0].status == "ok" and steps[0].output == "[0,1,4,9,16,25,36]"
    items = durable.runtime.store.fanout.list_items(handle.id)
    assert [(i.item, i.status, i.name) for i in items] == [(n, "ok", square.name) for n in range(7)]


def test_map_of_several_iterables_stops_at_the_shortest_like_map(durable):
    @durable.step
    def add(a: int, b: int) -> int:
        return a + b

    @durable.workflow
    def adds() -> list[int]:
        return cd.map(add, [1, 2, 3], [10, 20])

    assert adds.delay().get(timeout=5) == [11, 22]


def test_start_and_gather_and_routed_call(durable):
    @durable.step
    def fetch(source: str) -> dict:
        return {"source": source}

    @durable.step(queue="gpu")
    def render(page: int) -> str:
        return f"page-{page}"

    @durable.workflow
    def report() -> dict:
        a, b = cd.gather(fetch.start("a"), fetch.start("b"))
        single = fetch.start("c").result()
        return {"a": a, "b": b, "c": single, "cover": render(0)}

    handle = report.delay()
    assert handle.get(timeout=5) == {
        "a": {"source": "a"},
        "b": {"source": "b"},
        "c": {"source": "c"},
        "cover": "page-0",
    }
    names = [s.name for s in durable.runtime.store.load_steps(handle.id).values()]
    assert names == [fetch.name, fetch.name, fetch.name, render.name]


def test_failed_item_raises_step_failed_after_all_settle(durable):
    ran: list[int] = []

    @durable.step(max_attempts=2)
    def check(n: int) -> int:
        ran.append(n)
        if n in (3, 5):
            raise ValueError(f"bad {n}")
        return n

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def checks(exceptions: bool) -> list:
        results = cd.map(check, range(7), return_exceptions=exceptions)
        return [
            r if isinstance(r, int) else f"{type(r).__name__}: {r.error_message}" for r in results
        ]

    failing = checks.delay(False)
    with pytest.raises(WorkflowFailed) as failed:
        failing.get(timeout=5)
    assert failed.value.error_type == "celery_durable.errors.StepFailed"
    message = failed.value.error_message
    assert "item 3" in message and "ValueError: bad 3" in message
    assert "raise ValueError" in failed.value.error_traceback  # the item's own traceback
    assert failing.record().attempts == 1  # replay would raise the same: no workflow retry
    assert sorted(ran) == sorted([0, 1, 2, 3, 3, 4, 5, 5, 6])  # every item ran; 2 tries each
    assert checks.delay(True).get(timeout=5) == [
        0,
        1,
        2,
        "StepFailed: bad 3",
        4,
        "StepFailed: bad 5",
        6,
    ]


def test_eager_item_retries_record_their_true_attempt_count(durable):
    """Eager mode retries an item in-process: its row counts every attempt, as a worker's
    sweeper-driven retries would (``durable show`` prints it)."""
    flakies, tries = flaky_map(durable, 3)
    handle = flakies.delay(True)
    assert handle.get(timeout=5) == [
        0,
        1,
        "builtins.ValueError",
    ]
    assert tries == {0: 1, 1: 3, 2: 3}
    rows = durable.runtime.store.fanout.list_items(handle.id)
    assert [(r.item, r.status, r.attempts) for r in rows] == [
        (0, "ok", 1),
        (1, "ok", 3),
        (2, "error", 3),
    ]


def test_replay_returns_recorded_results_and_checks_determinism(durable):
    calls: list[int] = []
    flip = {"items": 3}

    @durable.step
    def echo(n: int) -> int:
        calls.append(n)
        return n

    @durable.workflow(max_attempts=3, retry_backoff=0)
    def replayed() -> list:
        values = cd.map(echo, range(flip["items"]))
        cd.sleep(0.01)
        return values

    handle = replayed.delay()
    wait_until(lambda: durable.runtime.sweeper.sweep_once() >= 0 and handle.status().finished, 10)
    assert handle.get(timeout=5) == [0, 1, 2]
    assert calls == [0, 1, 2]  # replayed after the sleep: not run again

    drifted = replayed.delay()
    assert drifted.status() is WorkflowStatus.WAITING
    flip["items"] = 4
    wait_until(lambda: durable.runtime.sweeper.sweep_once() >= 0 and drifted.status().finished, 10)
    with pytest.raises(WorkflowFailed, match="NonDeterminismError") as failed:
        drifted.get(timeout=5)
    assert "had 3 items in the recorded history, 4 now" in failed.value.error_message
    assert NonDeterminismError.__name__ in failed.value.error_type


def test_child_workflows_result_failure_and_derived_id(durable):
    @durable.workflow
    def ship(doc: str) -> str:
        return f"shipped {doc}"

    @durable.workflow(max_attempts=1)
    def broken(doc: str) -> str:
        raise KeyError(doc)

    @durable.workflow
    def parent(doc: str) -> dict:
        child = ship.start_child(doc)
        named = ship.start_child(doc + "!", run_id=f"named-{doc}")
        bad = broken.start_child(doc)
        results = cd.gather(child, named, bad, return_exceptions=True)
        try:
            bad.result()
        except cd.WorkflowFailed as exc:
            caught = exc.error_type
        return {"ids": [child.id, named.id], "results": [str(r) for r in results], "caught": caught}

    handle = parent.apply_async(args=("d1",), run_id="p-1")
    result = handle.get(timeout=5)
    assert result["ids"] == ["p-1:0", "named-d1"]
    assert result["results"][:2] == ["shipped d1", "shipped d1!"]
    assert "KeyError" in result["results"][2]
    assert result["caught"] == "builtins.KeyError"
    assert durable.get_handle("p-1:0").get(timeout=1) == "shipped d1"
    assert durable.get_handle("p-1:0").record().parent_id == "p-1"


def test_a_failed_child_fails_the_parent_with_workflow_failed(durable):
    @durable.workflow(max_attempts=1)
    def broken() -> None:
        raise RuntimeError("child broke")

    @durable.workflow(max_attempts=3)
    def parent() -> None:
        broken.start_child().result()

    handle = parent.delay()
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=5)
    assert failed.value.error_type == "celery_durable.errors.WorkflowFailed"
    assert "child broke" in failed.value.error_message
    assert handle.record().attempts == 1


def test_a_child_waiting_for_a_signal_suspends_the_parent_until_it_ends(durable):
    @durable.workflow
    def approval() -> str:
        return cd.wait_for_signal("ok")["by"]

    @durable.workflow
    def parent() -> str:
        return "approved by " + approval.start_child().result()

    handle = parent.apply_async(run_id="p-2")
    assert handle.status() is WorkflowStatus.WAITING
    child = durable.get_handle("p-2:0")
    assert child.status() is WorkflowStatus.WAITING
    child.signal("ok", {"by": "alice"})
    assert handle.get(timeout=5) == "approved by alice"


def test_cancelling_a_parent_cancels_its_children_but_not_detached_ones(durable):
    @durable.workflow
    def waits() -> None:
        cd.wait_for_signal("never")

    @durable.workflow
    def parent() -> None:
        attached = waits.start_child()
        waits.start_child(detached=True)
        attached.result()

    handle = parent.apply_async(run_id="p-3")
    assert handle.status() is WorkflowStatus.WAITING
    assert handle.cancel("stop") is WorkflowStatus.CANCELLED
    assert durable.get_handle("p-3:0").status() is WorkflowStatus.CANCELLED
    assert durable.get_handle("p-3:1").status() is WorkflowStatus.WAITING
    with pytest.raises(WorkflowCancelled, match="p-3"):
        durable.get_handle("p-3:0").get(timeout=1)


def test_a_cancelled_child_raises_workflow_cancelled_in_its_parent(durable):
    @durable.workflow
    def waits() -> None:
        cd.wait_for_signal("never")

    @durable.workflow
    def parent() -> str:
        child = waits.start_child(detached=True)
        try:
            child.result()
        except WorkflowCancelled as exc:
            return f"child cancelled: {exc.reason}"
        return "unreachable"

    handle = parent.apply_async(run_id="p-4")
    durable.get_handle("p-4:0").cancel("no longer needed")
    assert handle.get(timeout=5) == "child cancelled: no longer needed"


def test_an_unhandled_cancelled_child_fails_its_parent_not_cancels_it(durable):
    @durable.workflow
    def waits() -> None:
        cd.wait_for_signal("never")

    @durable.workflow(max_attempts=3)
    def parent() -> None:
        waits.start_child(detached=True).result()

    handle = parent.apply_async(run_id="p-5")
    durable.get_handle("p-5:0").cancel("gone")
    with pytest.raises(WorkflowFailed) as failed:
        handle.get(timeout=5)
    assert failed.value.error_type == "celery_durable.errors.WorkflowCancelled"
    assert "p-5:0" in failed.value.error_message and "gone" in failed.value.error_message
    assert handle.record().attempts == 1  # a recorded outcome: not retried


def test_child_result_with_a_timeout_is_a_durable_timer(durable):
    @durable.workflow
    def waits() -> str:
        return cd.wait_for_signal("go")

    @durable.workflow
    def parent() -> str:
        child = waits.start_child()
        try:
            return child.result(timeout=0.05)
        except CeleryTimeoutError:
            return "timed out"

    handle = parent.delay()
    assert handle.status() is WorkflowStatus.WAITING
    wait_until(lambda: durable.runtime.sweeper.sweep_once() >= 0 and handle.status().finished, 10)
    assert handle.get(timeout=5) == "timed out"


def test_outside_a_workflow_the_composition_api_says_what_to_do(durable):
    @durable.step
    def plain(n: int) -> int:
        return n

    @durable.step(queue="gpu")
    def routed(n: int) -> int:
        return n

    @durable.workflow
    def wf() -> None:
        return None

    with pytest.raises(RuntimeError, match=r"inside a workflow; call .*plain\(\.\.\.\)"):
        plain.start(1)
    with pytest.raises(RuntimeError, match=r"builtin map"):
        cd.map(plain, [1])
    with pytest.raises(RuntimeError, match="inside a workflow"):
        cd.gather()
    with pytest.raises(RuntimeError, match=r"wf.delay\(\)"):
        wf.start_child()
    with pytest.raises(RuntimeError, match=r"routed to queue 'gpu'.*routed.fn\(\.\.\.\)"):
        routed(1)
    assert routed.fn(2) == 2
    assert plain(3) == 3  # an unrouted step is still a plain call outside a workflow


def test_derived_ids_fit_amqp_correlation_ids():
    from celery_durable.core.ids import derived_id
    from celery_durable.engine.publish import item_task_id

    assert item_task_id("run-1", 3, 17) == "run-1:3:17"
    long_id = "é" * 200  # 200 characters, 400 bytes
    derived = item_task_id(long_id, 3, 17)
    assert len(derived.encode()) <= 255 and derived == item_task_id(long_id, 3, 17)
    assert derived_id(f"{long_id}:3") != derived_id(f"{long_id}:4")


BODY_CALLS = {
    "celery_durable.sleep()": lambda: cd.sleep(1),
    "celery_durable.sleep_until()": lambda: cd.sleep_until(dt.datetime.now(dt.timezone.utc)),
    "celery_durable.wait_for_signal()": lambda: cd.wait_for_signal("go"),
    "celery_durable.set_state()": lambda: cd.set_state(1),
    "celery_durable.continue_as_new()": lambda: cd.continue_as_new(),
    "celery_durable.compensate()": lambda: cd.compensate(),
    "celery_durable.patched()": lambda: cd.patched("change"),
    "celery_durable.deprecate_patch()": lambda: cd.deprecate_patch("change"),
    "cd.gather()": lambda: cd.gather(),
}


def test_every_body_call_refuses_outside_a_workflow_and_inside_a_step(durable):
    for what, call in BODY_CALLS.items():
        with pytest.raises(RuntimeError) as outside:
            call()
        assert str(outside.value).startswith(f"{what} can only be called inside a workflow")

    refused: dict[str, str] = {}

    @durable.step
    def inner() -> None:
        for what, call in BODY_CALLS.items():
            try:
                call()
            except RuntimeError as exc:
                refused[what] = str(exc)

    @durable.workflow
    def outer() -> None:
        inner()

    assert outer.delay().get(timeout=10) is None
    assert refused == {
        what: f"{what} can't be called inside a step; call it from the workflow body"
        for what in BODY_CALLS
    }
