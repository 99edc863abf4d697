"""What asyncio tests need: a lag probe on the running loop, waits with deadlines, and
``run_apart``, which runs a test's coroutine apart from any loop the process runs.

Example::

    async with LagProbe() as lag:
        await handle.aget(timeout=30)
    assert lag.worst < 0.1
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class LagProbe:
    """A 1 ms ticker on the running loop; ``worst``: the longest it was late (seconds),
    which is how long something held the loop without awaiting, and ``worst_during``: the
    ``phase`` the caller had named then (say which call is under way, for a failure)."""

    tick = 0.001

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0
        self.phase = "start"
        self.worst_during = ""
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before, phase = loop.time(), self.phase
            await asyncio.sleep(self.tick)
            late = loop.time() - before - self.tick
            if late > self.worst:
                self.worst, self.worst_during = late, f"{phase} .. {self.phase}"
            self.ticks += 1

    async def __aenter__(self) -> LagProbe:
        # A full garbage collection of the test process's heap (every earlier test's
        # objects) stalls any loop for 100 ms and more: not the code under test. Frozen,
        # those objects are left out of collections while the probe runs.
        gc.freeze()
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0)  # ticking from here on
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        finally:
            gc.unfreeze()


async def await_until(
    condition: Callable[[], Awaitable[T]], timeout: float = 30.0, message: str = "condition"
) -> T:
    """``wait_until`` for a coroutine condition, sleeping on the loop between tries."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(0.05)


def run_apart(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a thread of its own: the test process's main thread may hold a
    running loop already (Playwright's sync API leaves one), where ``asyncio.run`` fails."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
