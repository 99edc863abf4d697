"""The event loop an ``async def`` workflow body runs on, and the marks that tell a step
it is called from one.

Celery's worker calls a task as a function, in a pool process (prefork), its main thread
(solo) or one of its threads (threads). An async body runs on an event loop of that
thread: made by the thread's first async body and reused by every later one, so a
delivery pays no loop setup and clients bound to a loop (an ``httpx.AsyncClient`` made
at import) keep working across deliveries. When the body returns or raises, the tasks it
left behind (a branch of a ``gather`` still awaiting when another raised) are cancelled
before the delivery settles: a cancelled step records nothing and runs again on replay.

Example::

    value = run_body(definition.fn(*args, **kwargs))   # the body's coroutine
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_thread = threading.local()

# Set while an async body runs (and copied into the tasks and threads it starts): a plain
# def step called on the loop's thread would block every other branch of the run.
ASYNC_BODY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "celery_durable_async_body", default=False
)
# Set inside an async step's own task: a step it calls runs as a plain call, as inside a
# sync step (``WorkflowContext.in_step``, which concurrent branches can't share).
IN_ASYNC_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "celery_durable_in_async_step", default=False
)
# The step calls of the running async body, each with what names it: one never awaited
# would be a step silently skipped, so the body fails instead.
STEP_CALLS: contextvars.ContextVar[list[tuple[str, Coroutine[Any, Any, Any]]] | None] = (
    contextvars.ContextVar("celery_durable_step_calls", default=None)
)


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop for async bodies (made on first use, kept for the thread)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_thread, "loop", None)
    if loop is None or loop.is_closed():
        loop = _thread.loop = asyncio.new_event_loop()
    return loop


def run_body(body: Coroutine[Any, Any, Any]) -> Any:
    """Run an async body's coroutine to its end on this thread's loop; its value, or what
    it raised. Where a loop already runs in this thread (an eager start from async code,
    or a library's, such as Playwright's sync API), the body runs on the loop of a helper
    thread, which this thread waits for as it would for a plain body."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_thread_loop(body)
    context = contextvars.copy_context()  # the run's context goes with the body
    return _helper().submit(context.run, _run_on_thread_loop, body).result()


def _helper() -> ThreadPoolExecutor:
    global _helper_pool
    with _helper_lock:
        if _helper_pool is None:
            _helper_pool = ThreadPoolExecutor(1, thread_name_prefix="celery-durable-async")
        return _helper_pool


_helper_pool: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def _run_on_thread_loop(body: Coroutine[Any, Any, Any]) -> Any:
    loop = thread_loop()
    calls: list[tuple[str, Coroutine[Any, Any, Any]]] = []
    tokens = ASYNC_BODY.set(True), STEP_CALLS.set(calls)
    try:
        value = loop.run_until_complete(body)
    finally:
        ASYNC_BODY.reset(tokens[0])
        STEP_CALLS.reset(tokens[1])
        _cancel_left_behind(loop)
        skipped = [name for name, call in calls if _never_started(call)]
    if skipped:
        raise TypeError(
            f"{', '.join(skipped)} was called but never awaited, so it never ran: in an "
            "async workflow, await each step call (or pass it to asyncio.gather)"
        )
    return value


def _never_started(call: Coroutine[Any, Any, Any]) -> bool:
    if inspect.getcoroutinestate(call) != inspect.CORO_CREATED:  # type: ignore[arg-type]
        return False
    call.close()  # no "never awaited" warning on top of the error
    return True


def _cancel_left_behind(loop: asyncio.AbstractEventLoop) -> None:
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def on_loop_thread() -> bool:
    """Called from an async body's loop (not a thread it handed work to)."""
    if not ASYNC_BODY.get():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
