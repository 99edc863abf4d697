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
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from billiard.exceptions import SoftTimeLimitExceeded

T = TypeVar("T")

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
# The async steps of the running body that are running now: a wait that may suspend the
# run lets them finish (and record) first, instead of cancelling work already under way.
RUNNING_STEPS: contextvars.ContextVar[set[asyncio.Future[None]] | None] = contextvars.ContextVar(
    "celery_durable_running_steps", default=None
)


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop for async bodies (made on first use, kept for the thread)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_thread, "loop", None)
    if loop is None or loop.is_closed():
        loop = _thread.loop = asyncio.new_event_loop()

        def keep_soft_time_limit(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            # billiard raises SoftTimeLimitExceeded from a signal handler, wherever this
            # thread is: in a plain callback (a protocol's data_received, a future's done
            # callback), asyncio's handle runner would log it and go on, and the body
            # would run on to the hard limit. Stop the loop instead: the body ends with it.
            if context.get("handle") is not None and isinstance(
                context.get("exception"), SoftTimeLimitExceeded
            ):
                _thread.soft_time_limit = context["exception"]
                loop.stop()
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(keep_soft_time_limit)
    return loop


class Interruptible(Protocol):
    """What the heartbeat interrupts a body through (the run's ``LeaseClock``)."""

    interrupt: Callable[[], None] | None


def run_body(body: Coroutine[Any, Any, Any], interruptible: Interruptible | None = None) -> Any:
    """Run an async body's coroutine to its end on this thread's loop; its value, or what
    it raised. Where a loop already runs in this thread (an eager start from async code,
    or a library's, such as Playwright's sync API), the body runs on the loop of a helper
    thread, which this thread waits for as it would for a plain body.

    ``interruptible.interrupt()``, from any thread, cancels the body at its current
    await; the body then raises ``Interrupted``."""
    if not _loop_running_here():  # called outside the check: no "during handling" noise
        return _run_on_thread_loop(body, interruptible)
    return _run_on_own_thread(body, interruptible)


def _run_on_own_thread(body: Coroutine[Any, Any, Any], interruptible: Interruptible | None) -> Any:
    """The body on a thread of its own, with a loop of its own closed after it. One thread
    per call, not a pool: an eager child started by such a body nests another (a pool's
    threads, busy with their parents, would never take it)."""
    context = contextvars.copy_context()  # the run's context goes with the body
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, context.run(_run_on_thread_loop, body, interruptible)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, exc))
        finally:
            thread_loop().close()

    thread = threading.Thread(target=run, name="celery-durable-async")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Interrupted(BaseException):  # noqa: N818 - like CancelledError, which it replaces
    """The body was cancelled at an await by ``interrupt()`` (its run's cancellation)."""


def _run_on_thread_loop(body: Coroutine[Any, Any, Any], interruptible: Interruptible | None) -> Any:
    loop = thread_loop()
    calls: list[tuple[str, Coroutine[Any, Any, Any]]] = []
    tokens = ASYNC_BODY.set(True), STEP_CALLS.set(calls), RUNNING_STEPS.set(set())
    task = loop.create_task(body)  # in this context: the marks above go with it
    interrupted = threading.Event()

    def interrupt() -> None:
        interrupted.set()
        loop.call_soon_threadsafe(task.cancel)

    if interruptible is not None:
        interruptible.interrupt = interrupt
    _thread.soft_time_limit = None
    try:
        value = loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted.is_set():
            raise Interrupted() from None
        raise
    except RuntimeError:  # "Event loop stopped before Future completed."
        if _thread.soft_time_limit is None:
            raise
        raise _thread.soft_time_limit from None
    finally:
        if interruptible is not None:
            interruptible.interrupt = None
        ASYNC_BODY.reset(tokens[0])
        STEP_CALLS.reset(tokens[1])
        RUNNING_STEPS.reset(tokens[2])
        _cancel_left_behind(loop)
        skipped = [name for name, call in calls if _never_started(call)]
    if skipped:
        raise TypeError(
            f"{', '.join(skipped)} was called but never awaited, so it never ran: in an "
            "async workflow, await each step call and each wait (or pass them to "
            "asyncio.gather)"
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
    return ASYNC_BODY.get() and _loop_running_here()


def in_async_body() -> bool:
    """On an async body's loop and not inside one of its steps: the body API (waits,
    fan-in) returns awaitables here."""
    return on_loop_thread() and not IN_ASYNC_STEP.get()


def called(label: str, call: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """``call``, made by the body API for ``label``: a call never awaited fails the run
    naming it (a step, or a wait, silently skipped otherwise)."""
    calls = STEP_CALLS.get()
    if calls is not None:
        calls.append((label, call))
    return call


def returned(label: str, value: T) -> Coroutine[Any, Any, T]:
    """An awaitable of ``value`` (a replayed call's), failing the run if never awaited."""
    return called(label, _value(value))


async def _value(value: T) -> T:
    return value


def awaited_wait(label: str, wait: Callable[[], T]) -> Coroutine[Any, Any, T]:
    """A wait of an async body (a timer, a signal, fan-in), run when awaited: ``wait`` may
    suspend the run, so the body's steps already running finish and record first."""

    async def waiting() -> T:
        await steps_finished()
        return wait()

    return called(label, waiting())


async def steps_finished() -> None:
    """Return once the async steps running in this body have ended (recorded, or failed)."""
    await asyncio.sleep(0)  # tasks created just before (gather's, create_task's) start first
    running = RUNNING_STEPS.get()
    while running:
        await asyncio.wait(list(running))


async def uninterrupted(call: Coroutine[Any, Any, T]) -> tuple[T, bool]:
    """Await ``call`` to its end even if this task is cancelled meanwhile (a thread can't
    be stopped, and a write in flight may commit): its value, and whether a cancel came,
    for the caller to raise once it has recorded what finished."""
    future = asyncio.ensure_future(call)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(future), cancelled
        except asyncio.CancelledError:
            if future.done() and future.cancelled():
                raise
            cancelled = True


def others_running() -> bool:
    """More than the calling step of this body is running now."""
    running = RUNNING_STEPS.get()
    return running is not None and len(running) > 1


@contextmanager
def running_step() -> Iterator[None]:
    """Around an async step's run, so that ``steps_finished`` waits for it."""
    running = RUNNING_STEPS.get()
    if running is None:
        yield
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    running.add(done)
    try:
        yield
    finally:
        running.discard(done)
        done.set_result(None)
