"""The app the chaos workers run: one workflow of five work steps, a signal wait, a sleep.

Configured from the environment the driver (``benchmarks.chaos``) sets before it imports
this module and before it starts workers:

- ``CHAOS_BROKER_URL``: the broker, through the driver's proxy; ``CHAOS_QUEUE`` (unique);
- ``CHAOS_LEDGER_URL``: Redis, reached directly: the ledger lives outside the store;
- ``CHAOS_CHECK_DATABASE_URL``: Postgres, reached directly, for the re-run check;
- ``CHAOS_LEDGER_KEY``: the prefix of this run's ledger keys;
- ``CHAOS_PAUSE_AT_COMMIT=1``: see :func:`pause_after_commit`; ``CHAOS_MAX_ATTEMPTS``;
- ``CELERY_DURABLE_*``: the store (through the proxy), table prefix, namespace, lease...

The ledger: every work step, when it starts, reads its own row of the steps table on a
connection of its own, then adds 1 to the hash field ``<wf id>:<index>`` of
``<ledger key>:exec`` (how many times it really ran). If that row is already committed
with status ``ok`` and was written before the step was entered, the engine is running a
step whose record committed: the step pushes a JSON record onto ``<ledger key>:rerun``,
the suite's re-run-after-commit violations.

Example::

    CHAOS_BROKER_URL=redis://127.0.0.1:6379/0 CHAOS_QUEUE=chaos.q ... \\
        celery -A benchmarks.chaos.app worker -P prefork -c 2 -Q chaos.q
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import redis
from celery import Celery

import celery_durable as cd
from benchmarks.chaos.plan import (
    SIGNAL,
    SLEEP_BEFORE,
    SLEEP_SECONDS,
    STEPS,
    WAIT_BEFORE,
    mix,
    step_seconds,
)
from celery_durable import Durable, WorkflowContext
from celery_durable.core import faults

BROKER_URL = os.environ.get("CHAOS_BROKER_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("CHAOS_QUEUE", "celery_durable.chaos")
LEDGER_URL = os.environ.get("CHAOS_LEDGER_URL", "redis://127.0.0.1:6379/0")
LEDGER_KEY = os.environ.get("CHAOS_LEDGER_KEY", "chaos-ledger")
CHECK_URL = os.environ.get("CHAOS_CHECK_DATABASE_URL", "postgresql://postgres@127.0.0.1/test")
# A fault is not a poison message: a run may be hit by several (each claim is an attempt).
MAX_ATTEMPTS = int(os.environ.get("CHAOS_MAX_ATTEMPTS", "10"))

app = Celery("chaos", broker=BROKER_URL)
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=3,
    worker_enable_remote_control=False,
    worker_hijack_root_logger=True,
    task_publish_retry_policy={
        "max_retries": 3,
        "interval_start": 0.1,
        "interval_step": 0.2,
        "interval_max": 0.5,
    },
)
if BROKER_URL.startswith("redis"):
    # This run's unacked messages in keys of its own, so the suite can drop exactly what
    # a restart of a Redis without persistence would lose, and nothing of anyone else's.
    app.conf.broker_transport_options = {
        "unacked_key": f"{QUEUE}.unacked",
        "unacked_index_key": f"{QUEUE}.unacked_index",
        "unacked_mutex_key": f"{QUEUE}.unacked_mutex",
    }
durable = Durable(app)  # every setting from CELERY_DURABLE_* env vars

_ledger = redis.Redis.from_url(LEDGER_URL, decode_responses=True, socket_timeout=10)
_check: dict[int, Any] = {}  # pid -> psycopg connection (prefork children open their own)


def _check_connection() -> Any:
    import psycopg

    conn = _check.get(os.getpid())
    if conn is None or conn.closed:
        conn = psycopg.connect(CHECK_URL, autocommit=True, connect_timeout=5)
        _check[os.getpid()] = conn
    return conn


def committed_row(run_id: str, index: int) -> tuple[str, float] | None:
    """(status, created_at) of step ``index`` of ``run_id`` as committed, read directly."""
    config = durable.config
    query = (
        f'SELECT status, created_at FROM "{config.table_prefix}steps" '  # noqa: S608
        "WHERE namespace = %s AND run_id = %s AND idx = %s"
    )
    for last in (False, True):
        try:
            row = _check_connection().execute(query, (config.namespace, run_id, index)).fetchone()
            return None if row is None else (str(row[0]), float(row[1]))
        except Exception:
            _check.pop(os.getpid(), None)
            if last:
                raise
    return None


def enter_step() -> None:
    """Count this execution of the current step and check it was not committed already.

    A step that finds its own row committed ``ok`` is a re-run after commit if it was
    entered after that row was written (``created_at``, the database's clock, which is this
    machine's); entered before, it was paused inside this check and is only reported
    (``<ledger key>:late_check``).
    """
    entered = time.time()
    ctx = WorkflowContext.current()
    assert ctx is not None and ctx.in_step
    index = ctx.next_index - 1  # the step's index in the store (waits count too)
    field = f"{ctx.run_id}:{index}"
    try:
        row = committed_row(ctx.run_id, index)
    except Exception as exc:  # noqa: BLE001 - the instrument failed, not the engine
        _ledger.rpush(f"{LEDGER_KEY}:check_failed", f"{field}: {exc!r}")
        row = None
    # Counted after the check: the step's work (after this) is what must not repeat.
    _ledger.hincrby(f"{LEDGER_KEY}:exec", field, 1)
    if row is not None and row[0] == "ok":
        record = {
            "run_id": ctx.run_id,
            "index": index,
            "pid": os.getpid(),
            "attempt": ctx.attempt,
            "fence": ctx.fence,
            "entered": entered,
            "committed": row[1],
            "checked": time.time(),
        }
        kind = "rerun" if entered >= row[1] else "late_check"
        _ledger.rpush(f"{LEDGER_KEY}:{kind}", json.dumps(record))


@durable.step(name="chaos.work")
def work(seed: int, index: int, acc: int) -> int:
    """One work step: ledger entry, 20-120 ms of "work", a value from the previous one."""
    enter_step()
    time.sleep(step_seconds(seed, index))
    return mix(acc, seed, index)


@durable.workflow(name="chaos.flow", max_attempts=MAX_ATTEMPTS, retry_backoff=0.2)
def flow(seed: int, kind: str) -> dict[str, int]:
    """Five work steps; ``signal``/``both`` wait for a signal, ``sleep``/``both`` sleep."""
    acc = seed
    for i in range(STEPS):
        if i == WAIT_BEFORE and kind in ("signal", "both"):
            payload = cd.wait_for_signal(SIGNAL)
            acc = mix(acc, int(payload["v"]), 100)
        if i == SLEEP_BEFORE and kind in ("sleep", "both"):
            cd.sleep(SLEEP_SECONDS)
        acc = work(seed, i, acc)
    return {"acc": acc, "steps": STEPS}


def pause_after_commit(point: str, info: dict[str, Any]) -> None:
    """``--pause-at-commit``: when the driver asks (``SET <ledger key>:pause_request 1``),
    the first process to record a first step stops itself right after it committed,
    and tells the driver its pid (``<ledger key>:paused``), which sends it SIGCONT later."""
    # After the first work step (index 0): every kind of run has a work step right after it.
    if point != faults.AFTER_RECORD_STEP or info.get("step_index") != 0:
        return
    if not _ledger.delete(f"{LEDGER_KEY}:pause_request"):
        return
    _ledger.rpush(f"{LEDGER_KEY}:paused", json.dumps({"pid": os.getpid(), **info}))
    os.kill(os.getpid(), signal.SIGSTOP)


if os.environ.get("CHAOS_PAUSE_AT_COMMIT") == "1":
    faults.install(pause_after_commit)
