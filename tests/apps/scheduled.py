"""A worker app with schedules, on the same database and namespace as tests.apps.basic.
Each run's step notes its slot in Redis (``scheduled:<schedule>``), once per run that
really ran, so a test can tell which slots fired and whether any fired twice.

Every schedule here fires each second: ``tick`` (the defaults; ``tick-async``, the same
as an async body), ``gap-latest``,
``gap-all`` and ``gap-none`` (each catch-up policy, overlap "allow"), and ``slow`` (a run
of 2.5 s, overlap "skip")."""

from __future__ import annotations

import datetime as dt
import os
import time

import redis
from celery import Celery

from celery_durable import Durable

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("TEST_SCHEDULED_QUEUE", "scheduled")

app = Celery("scheduled", broker=os.environ.get("TEST_BROKER_URL", REDIS_URL))
app.conf.update(
    task_default_queue=QUEUE, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True
)
durable = Durable(app)  # the same CELERY_DURABLE_* settings as tests.apps.basic
_redis = redis.Redis.from_url(REDIS_URL, decode_responses=True)
KEY = os.environ.get("TEST_SCHEDULED_KEY", "scheduled")


@durable.step
def note(schedule: str, slot: str, seconds: float) -> str:
    time.sleep(seconds)
    _redis.rpush(f"{KEY}:{schedule}", slot)
    return slot


@durable.schedule(every=1, name="tick")
@durable.workflow(name="tests.scheduled.tick")
def tick(scheduled_for: dt.datetime) -> str:
    assert scheduled_for.tzinfo is not None
    return note("tick", scheduled_for.isoformat(), 0.0)


@durable.schedule(every=1, name="tick-async")
@durable.workflow(name="tests.scheduled.tick_async")
async def tick_async(scheduled_for: dt.datetime) -> str:
    """tick as an async body, its plain step run off the loop."""
    return await note("tick-async", scheduled_for.isoformat(), 0.0)


@durable.workflow(name="tests.scheduled.gap")
def gap(policy: str, scheduled_for: dt.datetime) -> str:
    return note(f"gap-{policy}", scheduled_for.isoformat(), 0.0)


for _policy in ("latest", "all", "none"):
    durable.schedule(
        gap, every=1, args=(_policy,), name=f"gap-{_policy}", catchup=_policy, overlap="allow"
    )


@durable.schedule(every=1, name="slow", overlap="skip")
@durable.workflow(name="tests.scheduled.slow")
def slow(scheduled_for: dt.datetime) -> str:
    return note("slow", scheduled_for.isoformat(), 2.5)
