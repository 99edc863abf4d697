"""The loop an async body runs on: a soft time limit that lands while the loop runs a
plain callback ends the body (asyncio's handle runner would log it and go on), and the
thread's loop serves the next body. The signal itself, landing in the selector or a
callback of a real pool process, is tested on a worker (tests/integration/
test_async_pools.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from billiard.exceptions import SoftTimeLimitExceeded

from celery_durable.body.event_loop import run_body, thread_loop


def on_a_thread(*bodies: Any) -> list[Any]:
    """Run each body with run_body, one after another, on one thread of its own (no loop
    runs there, whatever this process's main thread holds): what each returned or
    raised, and the thread's loop after each."""

    def run_all() -> list[Any]:
        outcomes = []
        for body in bodies:
            try:
                outcome: Any = run_body(body())
            except BaseException as exc:  # noqa: BLE001 - the outcome under test
                outcome = exc
            outcomes.append((outcome, thread_loop()))
        return outcomes

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run_all).result()


async def raises_in_a_callback(exc: BaseException) -> str:
    loop = asyncio.get_running_loop()

    def callback() -> None:
        raise exc

    loop.call_soon(callback)
    await asyncio.sleep(0.05)  # the callback runs meanwhile
    return "went on"


async def answers() -> int:
    return 42


def test_a_soft_time_limit_raised_in_a_callback_ends_the_body_and_keeps_the_loop():
    limit = SoftTimeLimitExceeded()
    (ended, loop), (value, same) = on_a_thread(lambda: raises_in_a_callback(limit), answers)
    assert ended is limit
    assert value == 42 and same is loop and not loop.is_closed()


def test_another_exception_in_a_callback_is_logged_and_the_body_goes_on(caplog):
    [(value, _loop)] = on_a_thread(lambda: raises_in_a_callback(ValueError("in a callback")))
    assert value == "went on"
    assert "in a callback" in caplog.text  # asyncio's own handler logged it, as before


def test_a_soft_time_limit_raised_in_the_body_ends_it_as_before():
    async def overruns() -> None:
        raise SoftTimeLimitExceeded()

    (first, loop), (second, _), (value, same) = on_a_thread(overruns, overruns, answers)
    assert isinstance(first, SoftTimeLimitExceeded) and isinstance(second, SoftTimeLimitExceeded)
    assert value == 42 and same is loop
