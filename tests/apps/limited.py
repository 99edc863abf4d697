"""A worker app with fleet-wide limiters, on the same database and namespace as
tests.apps.basic. Its steps note in Redis when they start and end (``limited:<key>:*``), so
a test can tell how many ran at once, in which order, across workers and SIGKILLs."""

from __future__ import annotations

import asyncio
import os
import time

import redis
import sqlalchemy as sa
from celery import Celery

import celery_durable as cd
from celery_durable import Durable

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("TEST_LIMITED_QUEUE", "limited")

app = Celery("limited", broker=os.environ.get("TEST_BROKER_URL", REDIS_URL))
app.conf.update(
    task_default_queue=QUEUE, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True
)
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic
_redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)

three = durable.limiter("tests.three", concurrency=3)
one = durable.limiter("tests.one", concurrency=1)
per_tenant = durable.limiter("tests.tenant", concurrency=1, key=lambda tenant, *_: tenant)
ten_a_second = durable.limiter("tests.rate", rate="10/s")


def running(key: str, label: str, seconds: float) -> None:
    """Note the start (how many run at once, in what order), hold while ``hold:<key>`` is
    set (at most a minute), sleep ``seconds``, note the end."""
    _redis.rpush(f"limited:{key}:at_once", _redis.incr(f"limited:{key}:running"))
    _redis.rpush(f"limited:{key}:order", label)
    _redis.rpush(f"limited:{key}:started", repr(time.time()))
    _redis.set(f"limited:{key}:pid:{label}", os.getpid())
    deadline = time.monotonic() + 60
    while _redis.exists(f"hold:{key}:{label}") and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(seconds)
    _redis.decr(f"limited:{key}:running")


@durable.step(limiter=three)
def three_at_once(key: str, n: int) -> int:
    running(key, str(n), 0.5)
    return n


@durable.workflow(name="tests.apps.limited.in_threes")
def in_threes(key: str, n: int) -> int:
    return three_at_once(key, n)


@durable.step(limiter=one)
def alone(key: str, label: str) -> str:
    running(key, label, 0.0)
    return label


@durable.workflow(name="tests.apps.limited.one_at_a_time")
def one_at_a_time(key: str, label: str) -> str:
    return alone(key, label)


@durable.workflow(name="tests.apps.limited.tenant_import", limiter=per_tenant)
def tenant_import(tenant: str, key: str, n: int) -> str:
    running(f"{key}:{tenant}", f"{tenant}:{n}", 0.05)
    _redis.rpush(f"limited:{key}:order", f"{tenant}:{n}")
    return tenant


@durable.step(limiter=ten_a_second)
def rated(key: str, n: int) -> int:
    _redis.rpush(f"limited:{key}:started", repr(time.time()))
    return n


@durable.workflow(name="tests.apps.limited.rate_run")
def rate_run(key: str, n: int) -> int:
    return rated(key, n)


@durable.workflow(name="tests.apps.limited.pair", concurrency=2)
def pair(key: str, n: int) -> int:
    """A negative ``n`` holds its slot while the test holds ``hold:<key>:pair``."""
    if n < 0:
        _redis.rpush(f"limited:{key}:holding", n)
        deadline = time.monotonic() + 120
        while _redis.exists(f"hold:{key}:pair") and time.monotonic() < deadline:
            time.sleep(0.02)
    _redis.incr(f"limited:{key}:done")
    return n


@durable.workflow(name="tests.apps.limited.solo", concurrency=1)
def solo(key: str, label: str) -> str:
    """One run at a time (a run limiter of its own): notes its start, held while the test
    holds ``hold:<key>:<label>``."""
    running(key, label, 0.0)
    return label


@durable.workflow(name="tests.apps.limited.free")
def free(key: str) -> str:
    return f"free {key}"


@durable.workflow(name="tests.apps.limited.synced")
def synced(key: str, value: int) -> int:
    """A deduplicated (or debounced) start: notes the arguments it ran with."""
    _redis.rpush(f"limited:{key}:synced", value)
    return value


@durable.step
def refund(key: str, result: str) -> None:
    _redis.rpush(f"limited:{key}:compensated", result)


@durable.step(compensate=refund)
def reserve(key: str) -> str:
    return f"reserved {key}"


@durable.workflow(name="tests.apps.limited.timed", timeout=2)
def timed(key: str) -> object:
    """Reserves (compensated), then waits for a signal that never comes: its deadline
    cancels it, and the reservation is refunded."""
    reserve(key)
    return cd.wait_for_signal("never", timeout=60)


@durable.step(terminate_on_timeout=True)
def long_call(key: str) -> str:
    running(key, "long", 0.0)  # held by the test for up to a minute
    return "finished"


@durable.workflow(name="tests.apps.limited.timed_call", timeout=2)
def timed_call(key: str) -> str:
    return long_call(key)


plenty = durable.limiter("tests.plenty", concurrency=1000)


@durable.step(limiter=plenty)
def charge(key: str, n: int) -> int:
    """Notes the slot row its step holds (``limited:<key>:slots``, "run:slot")."""
    ctx = cd.WorkflowContext.current()
    assert ctx is not None
    slots = durable.runtime.store.tables.limiter_slots
    with durable.runtime.store.engine.connect() as conn:
        held = conn.execute(
            sa.select(slots.c.slot).where(
                slots.c.namespace == durable.runtime.store.namespace,
                slots.c.limiter == plenty.name,
                slots.c.run_id == ctx.run_id,
                slots.c.idx == n,
            )
        ).scalar_one()
    _redis.rpush(f"limited:{key}:slots", f"{ctx.run_id}:{held}")
    return n


@durable.workflow(name="tests.apps.limited.charges")
def charges(key: str) -> int:
    """Four steps in a row behind one limiter: from its second run in a process on, each
    step's record keeps the slot for the next."""
    return sum(charge(key, n) for n in range(4))


@durable.workflow(name="tests.apps.limited.charge_twice", max_attempts=2, retry_backoff=120)
def charge_twice(key: str, fail: bool) -> int:
    """Two steps behind one limiter, and a failure between them when ``fail``: the
    retry's backoff must not hold the slot the first step's record kept for the second."""
    first = charge(key, 0)
    if fail:
        raise RuntimeError("failed between two limited steps")
    return first + charge(key, 1)


@durable.step(limiter=three)
async def three_at_once_async(key: str, n: int) -> int:
    await asyncio.to_thread(running, key, str(n), 0.5)  # the note's blocking Redis calls
    return n


@durable.workflow(name="tests.apps.limited.in_threes_async")
async def in_threes_async(key: str, n: int) -> int:
    """in_threes as an async body with an async step: the same limiter holds."""
    return await three_at_once_async(key, n)


@durable.workflow(name="tests.apps.limited.solo_async", concurrency=1)
async def solo_async(key: str, label: str) -> str:
    """solo as an async body: one run at a time (a run limiter of its own)."""
    await asyncio.to_thread(running, key, label, 0.0)
    return label
