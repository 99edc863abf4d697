"""The app the worker subprocesses run. Settings come from env vars set by conftest.

Side effects are counted in Redis (``INCR effects:<key>:<step>``) so a test can tell how
many times each step really ran, across processes and SIGKILLs.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import task_postrun

import celery_durable as cd
from celery_durable import Durable, PermanentError
from tests.support.faults import install_redis_faults

app = Celery("basic", broker=os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/0"))
if os.environ.get("TEST_QUEUE_TYPE") == "quorum":
    from kombu import Queue

    app.conf.task_queues = [
        Queue(
            os.environ["TEST_QUEUE"],
            queue_arguments={"x-queue-type": "quorum"},
            durable=True,
        )
    ]
app.conf.update(
    task_default_queue=os.environ.get("TEST_QUEUE", "celery"),
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)
durable = Durable(app)  # every setting from CELERY_DURABLE_* env vars
if os.environ.get("TEST_TRACE_FILE"):  # a tracing test reads this worker's spans
    from tests.support.tracefile import install_file_exporter

    install_file_exporter(os.environ["TEST_TRACE_FILE"])
_redis = redis.Redis.from_url(
    os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), decode_responses=True
)


install_redis_faults(_redis)


@task_postrun.connect
def note_finished(task_id: str | None = None, **_: Any) -> None:
    """``postrun:<task id>:<pid>``: which process finished a delivery (whichever worker)."""
    _redis.set(f"postrun:{task_id}:{os.getpid()}", "1", ex=600)


def effect(key: str, step: str) -> int:
    return int(_redis.incr(f"effects:{key}:{step}"))


def block_while_flagged(key: str, step: str) -> None:
    """Announce the step started, then block while the test holds the flag."""
    _redis.set(f"started:{key}:{step}", "1")
    deadline = time.monotonic() + 120
    while _redis.exists(f"block:{key}:{step}") and time.monotonic() < deadline:
        time.sleep(0.02)


@durable.step
def numbered(key: str, n: int) -> int:
    effect(key, f"s{n}")
    block_while_flagged(key, f"s{n}")
    return n * 10


@durable.workflow
def five_steps(key: str) -> list[int]:
    return [numbered(key, n) for n in range(1, 6)]


@app.task(name="tests.plain_blocking", acks_late=True)
def plain_blocking(key: str) -> None:
    """A plain Celery task with acks_late, the liveness benchmark's anchor: counted, its
    pid noted, blocked while flagged (``step`` "plain")."""
    effect(key, "plain")
    _redis.set(f"pid:{key}", str(os.getpid()), ex=600)
    block_while_flagged(key, "plain")


@durable.workflow(max_attempts=3, retry_backoff=0.1)
def flaky(key: str, failures: int) -> str:
    numbered(key, 1)
    if effect(key, "body") <= failures:
        raise RuntimeError(f"flaky failure {key}")
    return "ok"


@durable.step(max_attempts=3, backoff=0.01)
def flaky_step(key: str, failures: int) -> int:
    count = effect(key, "flaky_step")
    if count <= failures:
        raise ConnectionError(f"transient {count}")
    return count


@durable.step(max_attempts=5, backoff=0.01, dont_retry_on=(KeyError,))
def keyerror_step(key: str) -> None:
    effect(key, "keyerror_step")
    raise KeyError(key)


@durable.workflow(max_attempts=1)
def step_retries(key: str, failures: int) -> int:
    return flaky_step(key, failures)


@durable.workflow(max_attempts=3, retry_backoff=0.05)
def not_retried_step(key: str) -> None:
    keyerror_step(key)


@durable.workflow(max_attempts=3, retry_backoff=0.05)
def permanent(key: str) -> None:
    effect(key, "body")
    raise PermanentError(f"no way {key}")


@durable.step
def caught_failure(key: str) -> None:
    effect(key, "caught")
    raise ValueError(f"bad value {key}")


@durable.workflow(max_attempts=2, retry_backoff=0.05)
def catches(key: str) -> str:
    try:
        caught_failure(key)
    except ValueError as exc:
        message = str(exc)
    numbered(key, 2)
    if effect(key, "body") == 1:
        raise RuntimeError("fail after the caught step, to force a replay")
    return message


@durable.step(name="tests.branch_a")
def branch_a(key: str) -> str:
    return "a"


@durable.step(name="tests.branch_b")
def branch_b(key: str) -> str:
    return "b"


@durable.workflow(max_attempts=3, retry_backoff=0.05)
def drifting(key: str) -> str:
    """Calls a different step on its second attempt: replay must refuse."""
    first = branch_a(key) if effect(key, "body") == 1 else branch_b(key)
    raise RuntimeError(f"force a retry after {first}")


@durable.workflow(max_attempts=1)
def interrupted(key: str) -> None:
    effect(key, "body")
    raise KeyboardInterrupt("user code raised a BaseException")


@durable.workflow
def context_probe(key: str) -> dict:
    ctx = cd.WorkflowContext.current()
    assert ctx is not None
    return {
        "id": ctx.run_id,
        "name": ctx.workflow_name,
        "active": cd.WorkflowContext.is_active(),
    }


@durable.step
def kill_my_process(key: str) -> None:
    effect(key, "kill")
    os.kill(os.getpid(), 9)


@durable.workflow(max_attempts=2)
def suicidal(key: str) -> None:
    """Each attempt SIGKILLs its pool process: the attempt counter must end it."""
    kill_my_process(key)


@durable.step
def stamp(key: str, label: str) -> float:
    """Record when this step started (wall clock), for timer precision checks."""
    now = time.time()
    _redis.set(f"stamp:{key}:{label}", repr(now))
    return now


@durable.workflow
def booking(key: str, timeout: float) -> dict:
    hold = numbered(key, 1)
    decision = cd.wait_for_signal("approval", timeout=timeout)
    if decision is None:
        return {"status": "expired", "hold": hold}
    cd.set_state({"stage": "approved", "by": decision["by"]})
    cd.sleep(0.2)
    return {"status": "confirmed", "receipt": numbered(key, 2)}


@durable.workflow(max_attempts=2, retry_backoff=0.05)
def approval_or_timeout(key: str, timeout: float) -> list:
    """Tells a signal without a payload from a timeout; the first attempt fails after the
    wait, so the second replays it: both must see the same outcome."""
    decision = cd.wait_for_signal("approval", timeout=timeout, default="timed out")
    attempt = effect(key, "after_wait")
    if attempt == 1:
        raise RuntimeError(f"fail once after the wait {key}")
    return [decision, attempt]


@durable.workflow
def collector(key: str, count: int) -> list:
    numbered(key, 1)
    return [cd.wait_for_signal("item") for _ in range(count)]


@durable.workflow
def sleeper(key: str, seconds: float) -> float:
    start = stamp(key, "before")
    cd.sleep(seconds)
    return stamp(key, "after") - start


@durable.workflow
def long_sleeper(key: str) -> None:
    cd.sleep(3600)


@durable.workflow
def cancellable(key: str) -> list:
    return [numbered(key, n) for n in range(1, 4)]


@durable.workflow
def swallows_cancel(key: str) -> str:
    """A bare except around a step: the body swallows the cancellation and returns."""
    try:
        numbered(key, 1)
        numbered(key, 2)
    except BaseException:  # noqa: BLE001 - the point of this workflow
        pass
    return "finished anyway"


@durable.step
def fails_once(key: str) -> str:
    if effect(key, "fails_once") == 1:
        raise ConnectionError(f"first call fails {key}")
    return "second call ok"


@durable.workflow(max_attempts=3, retry_backoff=0.05)
def retried_step(key: str) -> str:
    return fails_once(key)


@durable.workflow(max_attempts=3, retry_backoff=0.05)
def state_of_object(key: str) -> None:
    effect(key, "body")
    cd.set_state(object())


@durable.workflow
def signalled_steps(key: str) -> list:
    first = numbered(key, 1)
    payload = cd.wait_for_signal("go")
    return [first, payload, numbered(key, 2)]


@durable.workflow
def sleep_between_steps(key: str) -> list[int]:
    """Steps 0 and 1, a timer at step 2, then steps 3 and 4 (s3, s4) after it."""
    before = [numbered(key, 1), numbered(key, 2)]
    cd.sleep(0.2)
    return before + [numbered(key, 3), numbered(key, 4)]


@durable.workflow(max_attempts=1)
def one_attempt(key: str) -> list[int]:
    """One attempt only: lost workers must not use it up."""
    return [numbered(key, n) for n in range(1, 4)]


@durable.workflow(max_attempts=1, time_limit=4)
def overruns(key: str) -> int:
    """A hard time limit: billiard SIGTERMs the pool child, as a cold shutdown does."""
    return numbered(key, 1)


# -- composition: parallel steps, routed steps, children ---------------------------------

GPU_QUEUE = os.environ.get("TEST_GPU_QUEUE", "gpu")


@durable.step(queue=GPU_QUEUE, max_attempts=2, backoff=0.05)
def render(key: str, page: int, hold: bool = False) -> str:
    """A routed step: always its own Celery task, on the session's gpu queue."""
    effect(key, f"render{page}")
    if hold:
        block_while_flagged(key, "render")
    return f"page-{page}"


@durable.workflow
def rendered(key: str, pages: int, hold_from: int = -1) -> list[str]:
    holds = [0 <= hold_from <= page for page in range(pages)]
    return cd.map(render, [key] * pages, range(pages), holds)


@durable.workflow
def rendered_or_errors(key: str, pages: int) -> list:
    """``rendered`` with return_exceptions=True: a failed item comes back in place."""
    results = cd.map(render, [key] * pages, range(pages), return_exceptions=True)
    return [r if isinstance(r, str) else {"type": r.error_type, "item": r.item} for r in results]


@durable.step
def fetch(key: str, source: str) -> dict:
    effect(key, f"fetch-{source}")
    return {"source": source}


@durable.workflow
def report(key: str) -> dict:
    a, b = cd.gather(fetch.start(key, "a"), fetch.start(key, "b"))
    cover = render(key, 0)  # routed: runs remotely, the body waits
    images = cd.map(render, [key] * 3, [1, 2, 3])
    return {"a": a, "b": b, "cover": cover, "images": images}


@durable.step(max_attempts=2, backoff=0.05)
def picky(key: str, n: int) -> int:
    effect(key, f"picky{n}")
    if n % 4 == 3:
        raise ValueError(f"item {n} refused")
    return n


@durable.workflow(max_attempts=2, retry_backoff=0.05)
def picky_map(key: str, count: int, return_exceptions: bool) -> list:
    effect(key, "body")
    results = cd.map(picky, [key] * count, range(count), return_exceptions=return_exceptions)
    return [
        r if isinstance(r, int) else {"type": r.error_type, "item": r.item, "step": r.step_name}
        for r in results
    ]


@durable.workflow(max_attempts=1)
def failing_child(key: str) -> None:
    effect(key, "failing_child")
    raise RuntimeError(f"child of {key} failed")


@durable.workflow
def parent_of_failing(key: str) -> dict:
    child = failing_child.start_child(key)
    try:
        child.result()
    except cd.WorkflowFailed as exc:
        return {"child": child.id, "type": exc.error_type, "message": exc.error_message}
    return {"child": child.id, "type": None, "message": None}


@durable.workflow
def unhandled_child_failure(key: str) -> None:
    failing_child.start_child(key).result()


@durable.workflow
def parent_with_work(key: str) -> list:
    """A running child (five_steps, blockable) and 20 items on the gpu queue at once."""
    child = five_steps.start_child(key)
    pages = cd.map(render, [key] * 20, range(20))
    return [child.result(), pages]


@durable.workflow
def parent_with_detached(key: str) -> str:
    collector.start_child(key, 1, detached=True)
    return cd.wait_for_signal("never")


@durable.step(queue=GPU_QUEUE)
def square(n: int) -> int:
    return n * n


@durable.workflow
def squares(count: int) -> int:
    """A wide fan-out (10,000 items in the scale test); returns a checksum, not the list."""
    values = cd.map(square, range(count))
    if values != [n * n for n in range(count)]:
        raise RuntimeError("results out of order")
    return sum(values)


@durable.step
def buggy(key: str, n: int) -> int:
    """Fails while ``bug:<key>`` is set in Redis: the bug a deploy then fixes (the worker
    reads the flag at every call, so clearing it changes the code the worker runs)."""
    effect(key, f"buggy{n}")
    if _redis.exists(f"bug:{key}"):
        raise RuntimeError(f"bug in step {n} of {key}")
    return n * 10


@durable.workflow(max_attempts=2, retry_backoff=0.05)
def fixable(key: str) -> list[int]:
    return [numbered(key, 1), buggy(key, 2), numbered(key, 3)]


@durable.workflow(max_attempts=1)
def fails_before_its_wait(key: str) -> list:
    """Fails at step 1 while ``bug:<key>`` is set, before its wait takes the approval."""
    return [numbered(key, 1), buggy(key, 2), cd.wait_for_signal("approval")]


@durable.step
def versioned(key: str, n: int) -> str:
    """Which version of the code ran this step: ``version:<key>`` in Redis (default 1)."""
    effect(key, f"v{n}")
    block_while_flagged(key, f"v{n}")
    return f"{n}@v{_redis.get(f'version:{key}') or 1}"


@durable.workflow
def four_steps(key: str) -> list[str]:
    return [versioned(key, n) for n in range(1, 5)]


@durable.workflow(max_attempts=2, retry_backoff=60)
def retried_later(key: str) -> None:
    """Fails its first attempt; the retry waits a minute (a test cancels it first)."""
    numbered(key, 1)
    raise RuntimeError(f"retry me {key}")


@durable.step
async def awaited(key: str, n: int) -> int:
    effect(key, f"a{n}")
    await asyncio.sleep(0.01 * n)
    return n * 10


@durable.workflow
async def gathers(key: str, count: int) -> list:
    """An async body: one awaited step, then ``count`` gathered at once."""
    first = await awaited(key, 0)
    rest = await asyncio.gather(*(awaited(key, n) for n in range(1, count + 1)))
    return [first, *rest]


@durable.step
async def kills_once_siblings_recorded(key: str, siblings: int) -> str:
    """On its first run, waits until its gathered siblings are recorded, then SIGKILLs
    its pool process: the replay must not run them again."""
    if effect(key, "killer") == 1:
        ctx = cd.WorkflowContext.current()
        assert ctx is not None
        deadline = time.monotonic() + 60
        while len(durable.runtime.store.load_steps(ctx.run_id)) < siblings:
            assert time.monotonic() < deadline, "the siblings were never recorded"
            await asyncio.sleep(0.02)
        os.kill(os.getpid(), 9)
    return "survived"


@durable.workflow(max_attempts=2)
async def gathers_then_dies(key: str) -> list:
    gathered = asyncio.gather(
        awaited(key, 1), awaited(key, 2), kills_once_siblings_recorded(key, 2)
    )
    return list(await gathered)


@durable.step
async def awaits_while_flagged(key: str, step: str) -> str:
    """Announce the step started, then await (not block) while the test holds the flag."""
    effect(key, step)
    _redis.set(f"started:{key}:{step}", "1")
    deadline = time.monotonic() + 120
    while _redis.exists(f"block:{key}:{step}") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    effect(key, f"{step}-done")
    return step


@durable.workflow(max_attempts=1)
async def cancelled_at_an_await(key: str) -> list:
    """Cancelled while it awaits its second step: that await is where it stops."""
    return [await awaited(key, 1), await awaits_while_flagged(key, "long")]


@durable.workflow
async def waits_in_an_async_body(key: str) -> dict:
    """The body API awaited: a plain def step (run off the loop), a timer, a signal and a
    child."""
    plain = await numbered(key, 7)
    await cd.sleep(0.3)
    approval = await cd.wait_for_signal("approve", timeout=120)
    child = await gathers.start_child(f"{key}:child", 2)
    return {"plain": plain, "approval": approval, "child": child}


@durable.workflow(max_attempts=1)
async def forgets_to_await(key: str) -> str:
    effect(key, "before")
    cd.sleep(3600)  # never awaited: the run fails instead of skipping the wait
    effect(key, "after")
    return "went on"
