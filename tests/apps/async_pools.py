"""The test app (tests.apps.basic: its app, Durable and tables) with the async workflows of
tests/integration/test_async_pools.py: where async bodies run (each pool's threads and
their loops), time limits, revoke(terminate=True), shutdowns and recycled pool processes.
A worker of this module runs basic's workflows too (``-A tests.apps.async_pools``).

An async body notes which loop it ran on: ``loop_seen`` answers with the process, the
thread, the loop's id and how many probes that loop has run, so a test can tell that a
loop is made once per thread and reused by later deliveries.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref

import redis

from tests.apps.basic import app, durable, effect

__all__ = ["app"]  # the worker's app: ``celery -A tests.apps.async_pools``

_redis = redis.Redis.from_url(
    os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), decode_responses=True
)

# How many probes each loop of this process has run: a loop made again would start at 1.
_probes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()


def loop_seen() -> dict[str, int]:
    loop = asyncio.get_running_loop()
    _probes[loop] = _probes.get(loop, 0) + 1
    return {
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "loop": id(loop),
        "probes": _probes[loop],
    }


async def held_while_flagged(key: str, step: str) -> None:
    """Announce the step started, then await (the loop idle in its selector) while the
    test holds the flag."""
    _redis.set(f"started:{key}:{step}", "1")
    deadline = time.monotonic() + 120
    while _redis.exists(f"block:{key}:{step}") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


@durable.step
async def meets(key: str, party: int) -> int:
    """Waits (at most a minute) until ``party`` probes of ``key`` are in this step at once:
    runs held together on one worker must be on threads of their own."""
    here = int(_redis.incr(f"meet:{key}"))
    deadline = time.monotonic() + 60
    while int(_redis.get(f"meet:{key}") or 0) < party:
        assert time.monotonic() < deadline, f"only {here} of {party} probes met"
        await asyncio.sleep(0.02)
    return here


@durable.workflow
async def probe(key: str, party: int = 1) -> dict[str, int]:
    """The loop this delivery's body ran on (``loop_seen``), after a step that waits until
    ``party`` probes of ``key`` run at once."""
    seen = loop_seen()
    await meets(key, party)
    return seen


@durable.step
async def awaited_step(key: str, n: int) -> int:
    effect(key, f"s{n}")
    await held_while_flagged(key, f"s{n}")
    return n * 10


@durable.workflow
async def async_five_steps(key: str) -> list[int]:
    """basic.five_steps, async: each step awaits while its ``block:`` flag is set."""
    return [await awaited_step(key, n) for n in range(1, 6)]


@durable.workflow(max_attempts=1)
async def async_one_attempt(key: str) -> list[int]:
    """One attempt only: lost workers must not use it up."""
    return [await awaited_step(key, n) for n in range(1, 4)]


@durable.step
async def sleeps_long(key: str) -> str:
    """Awaits a minute in one sleep: a signal can only find the loop in its selector."""
    effect(key, "sleep")
    _redis.set(f"started:{key}:sleep", "1")
    await asyncio.sleep(60)
    return "woke"


@durable.step
async def busy_in_callbacks(key: str) -> str:
    """Keeps the loop busy running a plain callback (as a protocol's data_received or a
    future's done callback runs): a signal finds the loop there, not in a coroutine."""
    effect(key, "busy")
    loop = asyncio.get_running_loop()
    never = loop.create_future()  # cancelled with the step

    def spin() -> None:
        until = time.monotonic() + 0.05
        while time.monotonic() < until:
            pass
        if not never.done():
            loop.call_soon(spin)

    loop.call_soon(spin)
    await never
    return "done"


@durable.step
def sleeps_long_sync(key: str) -> str:
    effect(key, "sleep")
    _redis.set(f"started:{key}:sleep", "1")
    time.sleep(60)
    return "woke"


@durable.workflow(max_attempts=1, soft_time_limit=1.5)
async def async_soft_overruns(key: str) -> str:
    """Past its soft time limit while its step awaits: billiard's SoftTimeLimitExceeded
    comes from a signal handler in the pool process's main thread, the loop's."""
    return await sleeps_long(key)


@durable.workflow(max_attempts=1, soft_time_limit=1.5, time_limit=10)
async def async_soft_overruns_busy(key: str) -> str:
    """Past its soft time limit while its loop runs a callback, which asyncio's handle
    runner would catch and log (the hard limit ends it if the soft one is lost)."""
    return await busy_in_callbacks(key)


@durable.workflow(max_attempts=1, soft_time_limit=1.5)
def sync_soft_overruns(key: str) -> str:
    """async_soft_overruns as a plain body: what the async one must match."""
    return sleeps_long_sync(key)


@durable.workflow(max_attempts=1, time_limit=4)
async def async_overruns(key: str) -> str:
    """A hard time limit: billiard SIGTERMs the pool child, as a cold shutdown does."""
    return await sleeps_long(key)
