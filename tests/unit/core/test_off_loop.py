"""Blocking calls awaited off the event loop (core/off_loop.py): on one bounded pool of
threads per process, with the caller's context, and a pool of its own in a forked child."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading

from celery_durable.core.off_loop import MAX_THREADS, off_loop, threads
from tests.support.event_loop import run_apart

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


def test_calls_run_on_a_bounded_pool_with_the_callers_context():
    started = threading.Barrier(MAX_THREADS)

    def where(n: int) -> tuple[str, str, int]:
        started.wait(timeout=30)  # every thread of the pool busy at once
        return threading.current_thread().name, request_id.get(), n

    async def calls() -> list[tuple[str, str, int]]:
        request_id.set("req-7")
        return await asyncio.gather(*(off_loop(where, n) for n in range(MAX_THREADS * 3)))

    results = run_apart(calls())
    assert [n for _, _, n in results] == list(range(MAX_THREADS * 3))
    assert {context for _, context, _ in results} == {"req-7"}
    names = {name for name, _, _ in results}
    assert len(names) == MAX_THREADS and all(n.startswith("celery_durable-client") for n in names)
    assert threads() is threads()  # one pool, reused


def test_a_forked_child_makes_a_pool_of_its_own():
    parent = threads()
    run_apart(off_loop(int))  # the parent's pool has threads
    pid = os.fork()
    if pid == 0:  # the child: its copy of the pool has no threads
        ok = threads() is not parent and run_apart(off_loop(lambda: 41 + 1)) == 42
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert threads() is parent
