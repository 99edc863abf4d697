"""async def workflows and steps on the embedded default (SQLite, eager): a step's index is
taken when it is called, so gathered steps replay from their records whatever order they
finished in; a plain def step runs off the loop; the body API (waits, maps, children) is
awaited; a step or a wait never awaited is a clear error."""

from __future__ import annotations

import asyncio
import threading

import pytest

import celery_durable as cd
from celery_durable import WorkflowFailed, WorkflowStatus
from tests.support.event_loop import run_apart
from tests.support.waiting import wait_until


def test_an_async_workflow_awaits_its_steps_and_replays_them(durable):
    calls: list[int] = []

    @durable.step
    async def fetch(n: int) -> int:
        calls.append(n)
        await asyncio.sleep(0)
        return n * 10

    @durable.workflow(max_attempts=1)
    async def flow(n: int) -> list[int]:
        first = await fetch(n)
        decision = await cd.wait_for_signal("go")  # the body stops here, then replays
        return [first, int(decision)]

    handle = flow.delay(4)
    handle.signal("go", 7)
    assert handle.get(timeout=5) == [40, 7]
    assert calls == [4]  # the replay returned the record: fetch ran once
    assert [s.name for s in handle.steps()][0].endswith("fetch")


def test_gathered_steps_run_at_once_and_replay_by_call_order(durable):
    calls: list[int] = []

    @durable.step
    async def slow(n: int) -> int:
        calls.append(n)
        await asyncio.sleep(0.05 * (4 - n))  # the first called finishes last
        return n

    @durable.workflow(max_attempts=1)
    async def flow() -> list[int]:
        gathered = await asyncio.gather(slow(1), slow(2), slow(3))
        await cd.wait_for_signal("go")
        return list(gathered)

    handle = flow.delay()
    steps = [s for s in handle.steps() if s.name.endswith("slow")]
    # Recorded as they finished (3 first), each under the index its call took.
    assert [(s.idx, s.output) for s in sorted(steps, key=lambda s: s.idx)] == [
        (0, "1"),
        (1, "2"),
        (2, "3"),
    ]
    handle.signal("go", None)
    assert handle.get(timeout=5) == [1, 2, 3]
    assert sorted(calls) == [1, 2, 3] and len(calls) == 3  # none ran again on replay


def test_a_plain_def_step_awaited_in_an_async_body_runs_off_the_loop(durable):
    threads: list[str] = []

    @durable.step
    def plain(n: int) -> int:
        threads.append(threading.current_thread().name)
        return n + 1

    @durable.workflow(max_attempts=1)
    async def flow() -> list[int]:
        loop_thread = threading.current_thread().name
        values = await asyncio.gather(plain(1), plain(2), plain(3))
        return [*values, int(loop_thread not in threads)]

    handle = flow.delay()
    assert handle.get(timeout=5) == [2, 3, 4, 1]
    assert [(s.idx, s.output) for s in handle.steps()] == [(0, "2"), (1, "3"), (2, "4")]


def test_a_step_called_from_a_thread_of_an_async_body_is_refused(durable):
    """Steps called from threads at once would take their indexes in thread order."""

    @durable.step
    def plain(n: int) -> int:
        return n + 1

    @durable.workflow(max_attempts=1)
    async def threaded() -> int:
        return await asyncio.to_thread(plain, 1)

    with pytest.raises(WorkflowFailed, match=r"called from a thread of an async workflow"):
        threaded.delay().get(timeout=5)


def test_a_step_called_but_never_awaited_fails_the_run(durable):
    @durable.step
    async def fetch(n: int) -> int:
        return n

    @durable.workflow(max_attempts=1)
    async def forgot() -> int:
        fetch(5)
        return 1

    with pytest.raises(WorkflowFailed, match=r"fetch \(index 0\) was called but never awaited"):
        forgot.delay().get(timeout=5)


def test_a_wait_never_awaited_fails_the_run_instead_of_being_skipped(durable):
    effects: list[str] = []

    @durable.workflow(max_attempts=1)
    async def hasty() -> str:
        cd.sleep(3600)
        effects.append("past the sleep")
        return "done"

    @durable.workflow(max_attempts=1)
    async def impatient() -> str:
        cd.wait_for_signal("approve")
        return "done"

    with pytest.raises(WorkflowFailed, match=r"cd.sleep\(\) \(index 0\) was called but never"):
        hasty.delay().get(timeout=5)
    with pytest.raises(WorkflowFailed, match=r"wait_for_signal\('approve'\) \(index 0\)"):
        impatient.delay().get(timeout=5)
    assert effects == ["past the sleep"]  # never suspended: the run failed at its end


def test_awaited_sleep_and_signal_suspend_the_run_and_replay(durable):
    @durable.step
    async def note(text: str) -> str:
        return text

    @durable.workflow(max_attempts=1)
    async def reminder() -> list:
        first = await note("before")
        await cd.sleep(0.05)
        answer = await cd.wait_for_signal("answer", timeout=60, default="none")
        return [first, answer]

    handle = reminder.delay()
    assert handle.status() is WorkflowStatus.WAITING  # at the sleep: no worker held

    def at_the_signal() -> bool:
        durable.runtime.sweeper.sweep_once()
        return any(s.name.endswith("answer") for s in handle.steps())

    wait_until(at_the_signal, 10, message="the timer to fire and the run to wait for answer")
    assert handle.status() is WorkflowStatus.WAITING
    handle.signal("answer", "yes")
    assert handle.get(timeout=5) == ["before", "yes"]
    assert [s.status for s in handle.steps()] == ["ok", "ok", "ok"]


def test_a_wait_lets_the_steps_already_running_finish_and_record(durable):
    @durable.step
    async def slow(n: int) -> int:
        await asyncio.sleep(0.05)
        return n

    @durable.workflow(max_attempts=1)
    async def flow() -> list:
        running = asyncio.ensure_future(slow(1))  # index 0, running alongside
        await cd.wait_for_signal("go")  # index 1: the run suspends once slow(1) recorded
        return [await running]

    handle = flow.delay()
    assert handle.status() is WorkflowStatus.WAITING
    assert [(s.idx, s.status, s.output) for s in handle.steps()][0] == (0, "ok", "1")
    handle.signal("go")
    assert handle.get(timeout=5) == [1]


def test_awaited_map_gather_and_children(durable):
    @durable.step(queue="gpu")
    def square(n: int) -> int:
        return n * n

    @durable.step
    def fetch(source: str) -> str:
        return f"from {source}"

    @durable.workflow
    async def ship(doc: str) -> str:
        return f"shipped {doc}"

    @durable.workflow(max_attempts=1)
    async def report(doc: str) -> dict:
        squares = await cd.map(square, range(4))
        a, b = await cd.gather(fetch.start("a"), fetch.start("b"))
        single = await fetch.start("c")
        child = ship.start_child(doc)
        shipped = await child
        timed = await ship.start_child(doc + "!").result(timeout=60)
        return {"squares": squares, "fetched": [a, b, single], "shipped": [shipped, timed]}

    handle = report.delay("d1")
    assert handle.get(timeout=10) == {
        "squares": [0, 1, 4, 9],
        "fetched": ["from a", "from b", "from c"],
        "shipped": ["shipped d1", "shipped d1!"],
    }


def test_the_body_api_is_refused_inside_an_async_step(durable):
    @durable.step
    async def sneaky() -> None:
        await cd.sleep(1)

    @durable.workflow(max_attempts=1)
    async def flow() -> None:
        await sneaky()

    with pytest.raises(WorkflowFailed, match=r"can't be called inside a step"):
        flow.delay().get(timeout=5)


def test_gathered_steps_that_fail_together_keep_the_first_failure(durable):
    calls: list[str] = []

    @durable.step
    async def boom(name: str, after: float) -> None:
        calls.append(name)
        await asyncio.sleep(after)
        raise ValueError(name)

    @durable.workflow(max_attempts=1)
    async def flow() -> list[str]:
        results = await asyncio.gather(boom("a", 0.01), boom("b", 0.02), return_exceptions=True)
        return [str(r) for r in results]

    handle = flow.delay()
    assert handle.get(timeout=5) == ["a", "b"]
    failed = [(s.idx, s.status) for s in handle.steps()]
    # The body caught both; the first is recorded, the second runs again on a replay.
    assert failed == [(0, "error")]


def test_a_failed_async_body_stores_its_own_traceback_only(durable):
    @durable.workflow(max_attempts=1)
    async def broken() -> None:
        raise KeyError("missing")

    with pytest.raises(WorkflowFailed) as failed:
        broken.delay().get(timeout=5)
    assert "KeyError: 'missing'" in failed.value.error_traceback
    assert "no running event loop" not in failed.value.error_traceback  # no checks' noise


def test_an_async_step_outside_a_workflow_is_its_coroutine(durable):
    @durable.step
    async def double(n: int) -> int:
        return 2 * n

    assert run_apart(double(3)) == 6  # a unit test awaits it as the function it wraps


def test_an_eager_child_of_a_body_started_where_a_loop_runs_runs_too(durable):
    """Each such body gets a thread of its own: a child started eagerly inside one nests
    another body, which a shared helper thread, busy with the parent, never took."""

    @durable.workflow
    async def child(n: int) -> int:
        return n * 2

    @durable.workflow(max_attempts=1)
    async def parent(n: int) -> int:
        return await child.start_child(n) + 1

    async def from_async_code() -> int:
        return parent.delay(20).get(timeout=5)

    assert run_apart(from_async_code()) == 41


def test_an_async_body_started_where_a_loop_runs_runs_on_a_helper_thread(durable):
    """An eager start from async code (or under a library that keeps a loop running in
    the thread, as Playwright's sync API does) waits for the body as for a plain one."""

    @durable.step
    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n + 1

    @durable.workflow(max_attempts=1)
    async def flow(n: int) -> int:
        return await fetch(n)

    async def from_async_code() -> int:
        return flow.delay(1).get(timeout=5)  # blocks this loop: eager mode, as for a plain run

    assert run_apart(from_async_code()) == 2


@pytest.fixture
def quick_heartbeat(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The embedded default with a lease of 1.5 s: the heartbeat beats every 0.5 s."""
    from celery import Celery

    for name in ("NAMESPACE", "TABLE_PREFIX", "DATABASE_URL"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("embedded", broker="memory://")
    app.conf.task_always_eager = True
    instance = cd.Durable(app, database_url=f"sqlite:///{tmp_path}/store.sqlite3", lock_timeout=1.5)
    instance.migrate()
    yield instance
    instance.runtime.store.dispose()


def test_cancelling_a_run_interrupts_the_awaited_step(quick_heartbeat):
    durable = quick_heartbeat
    reached: list[str] = []

    @durable.step
    async def first() -> str:
        return "first"

    @durable.step
    async def long_call() -> str:
        ctx = cd.WorkflowContext.current()
        assert ctx is not None
        durable.get_handle(ctx.run_id).cancel("no longer wanted")  # as from another process
        await asyncio.sleep(30)  # the heartbeat finds the request and cancels this await
        reached.append("the end of the step")
        return "late"

    @durable.workflow(max_attempts=1)
    async def flow() -> list[str]:
        return [await first(), await long_call()]

    handle = flow.delay()
    assert handle.status() is WorkflowStatus.CANCELLED
    assert handle.record().cancel_reason == "no longer wanted"
    assert reached == []
    assert [(s.idx, s.status) for s in handle.steps()] == [(0, "ok")]  # the cut step: none


def test_a_plain_step_in_flight_when_cancelled_finishes_and_is_recorded(quick_heartbeat):
    durable = quick_heartbeat
    body_loop: list[asyncio.AbstractEventLoop] = []

    def interrupted() -> bool:
        """The body's task has a cancel pending: the heartbeat interrupted it."""
        tasks = asyncio.all_tasks(body_loop[0])
        return any(task.cancelling() for task in tasks)

    @durable.step
    def blocking() -> str:
        ctx = cd.WorkflowContext.current()
        assert ctx is not None
        durable.get_handle(ctx.run_id).cancel("stop")
        # A thread can't be stopped: finish once the heartbeat has interrupted the body.
        wait_until(interrupted, 10, message="the heartbeat to interrupt the body")
        return "finished"

    @durable.workflow(max_attempts=1)
    async def flow() -> str:
        body_loop.append(asyncio.get_running_loop())
        value = await blocking()
        return value + " and went on"

    handle = flow.delay()
    assert handle.status() is WorkflowStatus.CANCELLED
    assert [(s.idx, s.status, s.output) for s in handle.steps()] == [(0, "ok", '"finished"')]


def test_a_record_is_written_off_the_loop_while_other_steps_run(durable, monkeypatch):
    """Steps that finish together commit together: not one after another on the loop."""
    store = durable.runtime.store
    writers: list[tuple[int, str]] = []
    record_step = store.record_step

    def noting_thread(run_id, fence, step, carried=()):  # type: ignore[no-untyped-def]
        writers.append((step.idx, threading.current_thread().name))
        return record_step(run_id, fence, step, carried=carried)

    monkeypatch.setattr(store, "record_step", noting_thread)

    @durable.step
    async def wait_for(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    loop_threads: list[str] = []

    @durable.workflow(max_attempts=1)
    async def flow() -> list[float]:
        loop_threads.append(threading.current_thread().name)
        return list(await asyncio.gather(wait_for(0.01), wait_for(0.3)))

    assert flow.delay().get(timeout=5) == [0.01, 0.3]
    first, second = writers
    assert first[0] == 0 and first[1].startswith("celery_durable-client")  # the other ran on
    assert second == (1, loop_threads[0])  # alone by then: written on the loop
