"""A worker app with a Redis result backend, on the same database and namespace as
tests.apps.basic: workflows in Celery's canvas (chain, group, chord, link), started by name
and by beat, and the plain tasks around them.

Plain tasks note what they saw in Redis (``seen:<tag>``: a list of JSON entries), so a
test can tell how many times each ran, with what, and under which parent and root ids.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import redis
from celery import Celery

import celery_durable as cd
from celery_durable import Durable
from tests.support.faults import install_redis_faults

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("TEST_CANVAS_QUEUE", "canvas")

app = Celery("canvas", broker=os.environ.get("TEST_BROKER_URL", REDIS_URL), backend=REDIS_URL)
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    task_track_started=True,
    result_expires=3600,
)
if os.environ.get("TEST_BEAT_KEY"):  # a beat test's entry: once a second
    app.conf.beat_schedule = {
        "tick": {
            "task": "tests.apps.canvas.tick",
            "schedule": 1.0,
            "args": (os.environ["TEST_BEAT_KEY"],),
        }
    }
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic
_redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)
install_redis_faults(_redis)


def note(tag: str, **entry: Any) -> None:
    _redis.rpush(f"seen:{tag}", json.dumps(entry))


# -- plain tasks ------------------------------------------------------------------------


@app.task(name="tests.apps.canvas.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="tests.apps.canvas.record", bind=True)
def record(self: Any, value: Any, tag: str) -> Any:
    note(tag, value=value, parent_id=self.request.parent_id, root_id=self.request.root_id)
    return value


@app.task(name="tests.apps.canvas.errback")
def errback(request: Any, exc: BaseException, traceback: Any, tag: str) -> None:
    note(tag, error=type(exc).__name__, message=str(exc), task_id=request.id)


@app.task(name="tests.apps.canvas.total", bind=True)
def total(self: Any, values: list[Any], tag: str) -> Any:
    note(tag, value=values, parent_id=self.request.parent_id, root_id=self.request.root_id)
    return sum(values)


# -- workflows --------------------------------------------------------------------------


@durable.step
def slow_square(n: int, tag: str) -> int:
    """Held while the test holds ``hold:<tag>:<n>``; ``pid:<tag>:<n>`` names its process."""
    # Counted before the pid is named: the test kills as soon as it sees the pid, and a
    # kill between the two would leave this run uncounted.
    _redis.incr(f"squares:{tag}:{n}")
    _redis.set(f"pid:{tag}:{n}", os.getpid())
    deadline = time.monotonic() + 60
    while _redis.exists(f"hold:{tag}:{n}") and time.monotonic() < deadline:
        time.sleep(0.02)
    return n * n


@durable.workflow(name="tests.apps.canvas.square")
def square(n: int, tag: str) -> int:
    return slow_square(n, tag)


@durable.step
def doubled(n: int) -> int:
    return 2 * n


@durable.workflow(name="tests.apps.canvas.approval")
def approval(value: int, tag: str) -> int:
    """Doubles ``value``, then waits for the "approved" signal: its payload is added."""
    first = doubled(value)
    extra = cd.wait_for_signal("approved", timeout=120)
    return first + int(extra)


@durable.workflow(name="tests.apps.canvas.failing", max_attempts=2, retry_backoff=0.1)
def failing(tag: str) -> None:
    doubled(1)
    raise KeyError(f"no order for {tag}")


@durable.workflow(name="tests.apps.canvas.tagged")
def tagged(value: int, tag: str) -> dict[str, Any]:
    return {"value": doubled(value), "tag": tag}


@durable.step
def counted(key: str) -> int:
    return int(_redis.incr(f"ticks:{key}"))


@durable.workflow(name="tests.apps.canvas.tick")
def tick(key: str) -> int:
    return counted(key)


@durable.workflow(name="tests.apps.canvas.parent")
def parent(tag: str) -> int:
    """Starts ``tagged`` as a child with a link of its own."""
    child = tagged.start_child(5, tag, link=record.s(f"{tag}-child"))
    return int(child.result()["value"])


@durable.workflow(name="tests.apps.canvas.summed")
def summed(values: list[int], tag: str) -> int:
    """A chord's body: the header's results, in order."""
    return sum(doubled(value) for value in values) // 2


@durable.step
async def async_doubled(n: int) -> int:
    await asyncio.sleep(0)
    return n * 2


@durable.workflow(name="tests.apps.canvas.async_square")
async def async_square(n: int, tag: str) -> int:
    """square as an async body: in a chain, its result goes to the next task."""
    note(tag, task="async_square", n=n)
    return await async_doubled(n) * n // 2
