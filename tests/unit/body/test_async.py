"""async def workflows and steps on the embedded default (SQLite, eager): a step's index is
taken when it is called, so gathered steps replay from their records whatever order they
finished in; a plain def step on the loop and a step never awaited are clear errors."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import celery_durable as cd
from celery_durable import WorkflowFailed


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
        decision = cd.wait_for_signal("go")  # the body stops here, then replays
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
        cd.wait_for_signal("go")
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


def test_a_plain_def_step_on_the_loop_is_refused_and_runs_off_it(durable):
    @durable.step
    def plain(n: int) -> int:
        return n + 1

    @durable.workflow(max_attempts=1)
    async def on_loop() -> int:
        return plain(1)

    @durable.workflow(max_attempts=1)
    async def off_loop() -> int:
        return await asyncio.to_thread(plain, 1)

    with pytest.raises(WorkflowFailed, match=r"plain def called from an async workflow"):
        on_loop.delay().get(timeout=5)
    handle = off_loop.delay()
    assert handle.get(timeout=5) == 2
    assert [s.name for s in handle.steps()][0].endswith("plain")  # recorded as a step


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


def test_an_async_step_outside_a_workflow_is_its_coroutine(durable):
    @durable.step
    async def double(n: int) -> int:
        return 2 * n

    assert run_apart(double(3)) == 6  # a unit test awaits it as the function it wraps


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


def run_apart(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` on a thread of its own: this process's main thread may hold a
    running loop already (Playwright's sync API leaves one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
