"""Blocking calls awaited from asyncio without blocking its event loop: one bounded pool of
threads per process.

The async client (``await wf.adelay()``, ``await handle.asignal()``...) runs the sync code
of a start, a signal or a cancel on these threads, so the two can't drift apart; an async
body writes the records of steps that finish together on them, so they commit together. The pool is
made on first use, holds at most ``MAX_THREADS`` threads whatever the number of calls (a
call waits for a free thread rather than starting one), and is made anew in a forked
child, whose copy of the parent's has no threads.

Example::

    handle = await off_loop(checkout.apply_async, (42,), {}, run_id="order-42")
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# Each thread that talks to the store holds one pooled connection while it does: the bound
# on threads is also the client's bound on extra connections. Fewer threads did not lower
# the event loop's lag in the benchmark, and started fewer runs (benchmarks/RESULTS.md,
# 2026-12-07: 4 threads, lag p99 5.60 ms and 0.72 x a pool of 6 threads' starts; 8
# threads, 5.47 ms and 1.07 x).
MAX_THREADS = 8

_pool: ThreadPoolExecutor | None = None
_pid = -1
_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _pool, _lock
    # The child has none of the parent's threads: its first call makes a pool of its own.
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def threads() -> ThreadPoolExecutor:
    """This process's pool of client threads, made on first use."""
    global _pool, _pid
    pool = _pool
    if pool is not None and _pid == os.getpid():
        return pool
    with _lock:
        if _pool is None or _pid != os.getpid():
            _pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="celery_durable-client")
            _pid = os.getpid()
        return _pool


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a client thread, awaited. The caller's context variables
    (a trace's current span) go with it, as ``asyncio.to_thread`` does. Cancelling the
    await does not stop the call: what it does (a start, a signal) may still happen."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(threads(), call)
