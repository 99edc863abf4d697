"""The schedules' figures (issue 24): the sweeper's schedule pass with 1,000 schedules
declared, most due at different times, against the same pass with none; and the slot lag
(how late a slot's run is started) under a sweeper polling at the default interval.

Run on its own: ``python -m benchmarks.schedules`` (Postgres from BENCH_DATABASE_URL or
CELERY_DURABLE_DATABASE_URL, default the local test database). Its tables get a prefix of
their own and are dropped afterwards.

Example::

    python -m benchmarks.schedules --schedules 1000 --polls 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from typing import Any

from celery import Celery
from sqlalchemy import create_engine, text

from celery_durable import Durable
from celery_durable.schedules import firing
from celery_durable.schedules.declared import sync

URL = os.environ.get(
    "BENCH_DATABASE_URL",
    os.environ.get("CELERY_DURABLE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/test"),
)


def _durable(prefix: str, schedules: int) -> Durable:
    app = Celery(f"bench-{prefix}", broker="memory://")
    app.conf.task_always_eager = True
    durable = Durable(app, database_url=URL, table_prefix=prefix, namespace=prefix)
    durable.migrate()

    @durable.workflow(name=f"{prefix}.job")
    def job() -> None: ...

    for i in range(schedules):
        # Hourly to daily intervals and crons at every minute of the day: due apart.
        if i % 2:
            durable.schedule(job, every=3600 + 37 * i, name=f"every-{i}")
        else:
            durable.schedule(job, cron=f"{i % 60} {i // 60 % 24} * * *", name=f"cron-{i}")
    return durable


def pass_cost(schedules: int, polls: int) -> dict[str, Any]:
    """Milliseconds of one schedule pass (lock the due rows, fire none), median of
    ``polls``, with ``schedules`` declared."""
    prefix = f"bsch{uuid.uuid4().hex[:6]}_"
    durable = _durable(prefix, schedules)
    try:
        sync(durable.runtime)
        for _ in range(20):
            firing.fire_due(durable.runtime)  # warm: connections, statement cache
        samples = []
        for _ in range(polls):
            began = time.perf_counter()
            firing.fire_due(durable.runtime)
            samples.append((time.perf_counter() - began) * 1000)
        return {"schedules": schedules, "ms_p50": statistics.median(samples)}
    finally:
        durable.runtime.store.dispose()
        _drop(prefix)


def slot_lag(seconds: float, poll: float = 1.0) -> dict[str, Any]:
    """How late each slot of an every-second schedule is fired (its ``schedule_slots``
    row's fired_at minus the slot), by a sweeper polling every ``poll`` seconds."""
    prefix = f"bsch{uuid.uuid4().hex[:6]}_"
    durable = _durable(prefix, 0)

    @durable.workflow(name=f"{prefix}.tick")
    def tick() -> None: ...

    durable.schedule(tick, every=1, name="tick")
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            durable.runtime.sweeper.sweep_once()
            time.sleep(poll)  # the sweeper's own cadence, as a worker's sweeper thread
        fired = durable.runtime.store.schedules.firings("tick", 10_000)
        lags = sorted(s.fired_at - s.slot for s in fired)
        return {
            "slots": len(lags),
            "lag_p50_s": statistics.median(lags),
            "lag_p99_s": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "poll_interval_s": poll,
        }
    finally:
        durable.runtime.store.dispose()
        _drop(prefix)


def _drop(prefix: str) -> None:
    engine = create_engine(URL)
    with engine.begin() as conn:
        names = conn.execute(
            text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"), {"p": f"{prefix}%"}
        ).scalars()
        for name in list(names):
            conn.execute(text(f'DROP TABLE IF EXISTS "{name}" CASCADE'))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=300)
    parser.add_argument("--lag-seconds", type=float, default=30.0)
    args = parser.parse_args()
    without = pass_cost(0, args.polls)
    with_them = pass_cost(args.schedules, args.polls)
    lag = slot_lag(args.lag_seconds)
    added = with_them["ms_p50"] - without["ms_p50"]
    result = {"without": without, "with": with_them, "added_ms": added, "lag": lag}
    print(json.dumps(result, indent=2))
    verdict = "PASS" if added < 2.0 else "FAIL"
    print(f"[{verdict}] schedule pass with {args.schedules} schedules: +{added:.3f} ms (< 2 ms)")
    print(
        f"slot lag at a {lag['poll_interval_s']} s poll: p50 {lag['lag_p50_s'] * 1000:.0f} ms, "
        f"p99 {lag['lag_p99_s'] * 1000:.0f} ms over {lag['slots']} slots"
    )


if __name__ == "__main__":
    main()
