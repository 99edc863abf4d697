"""How soon a SIGKILLed worker's run resumes elsewhere: from the SIGKILL to the start of
the interrupted step on another worker, with a 30 s lease (the proof of life's takeover,
``store/liveness.py``, not the lease's expiry).

    python -m benchmarks.liveness --broker redis --kills 7
    python -m benchmarks.liveness --broker rabbitmq --kills 7 --pool-process
    python -m benchmarks.liveness --poll-interval 0.2     # the tests' sweeper period

Each kill: a ``five_steps`` run of the tests' app (tests/apps/basic.py) blocks in step 3 on
one of two workers (``-P prefork -c 2``); that worker's process group (or, with
``--pool-process``, only the pool process running it) is SIGKILLed; the figure is the time
until step 3 starts again (its Redis counter, polled every 5 ms). A killed worker is
replaced before the next kill. Prints each figure, then p50 and max.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from tests.support.services import AMQP_URL, PG_URL, REDIS_URL, drop_tables, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

LEASE = "30"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.liveness")
    parser.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis")
    parser.add_argument("--kills", type=int, default=7)
    parser.add_argument("--pool-process", action="store_true", help="kill one pool process")
    parser.add_argument(
        "--poll-interval", default="1", help="durable_poll_interval (sweeps), default 1 s"
    )
    args = parser.parse_args(argv)
    prefix, queue = unique("lv")[:9] + "_", unique("lvq-")
    os.environ.update(
        {
            "CELERY_DURABLE_DATABASE_URL": PG_URL,
            "CELERY_DURABLE_TABLE_PREFIX": prefix,
            "CELERY_DURABLE_NAMESPACE": unique("lvns-"),
            "CELERY_DURABLE_LOCK_TIMEOUT": LEASE,
            "CELERY_DURABLE_POLL_INTERVAL": args.poll_interval,
            "CELERY_DURABLE_DISPATCH_GRACE": "2",
            "TEST_BROKER_URL": AMQP_URL if args.broker == "rabbitmq" else REDIS_URL,
            "TEST_REDIS_URL": REDIS_URL,
            "TEST_QUEUE": queue,
        }
    )
    from tests.apps import basic  # reads the settings above

    basic.durable.migrate()
    rds = basic._redis
    workers = [Worker("tests.apps.basic", {}, queues=queue, name=unique("lv-")) for _ in "ab"]
    figures: list[float] = []
    try:
        for worker in workers:
            worker.wait_ready()
        for _ in range(args.kills):
            key = unique("k")
            rds.set(f"block:{key}:s3", "1")
            handle = basic.five_steps.delay(key)
            wait_until(lambda k=key: rds.get(f"started:{k}:s3"), 60, message="step 3")
            owner = wait_until(lambda h=handle: h.record().owner, 30, message="the owner")
            pid = int(owner.split(":")[1])
            victim = next(w for w in workers if w.proc.pid == parent_of(pid))
            killed_at = time.monotonic()
            if args.pool_process:
                os.kill(pid, signal.SIGKILL)
            else:
                victim.kill()
            wait_until(
                lambda k=key: int(rds.get(f"effects:{k}:s3") or 0) >= 2, 60, 0.005, "step 3 again"
            )
            figures.append(time.monotonic() - killed_at)
            print(f"kill {len(figures)}: step 3 again after {figures[-1]:.2f}s", flush=True)
            rds.delete(f"block:{key}:s3")
            handle.get(timeout=60)
            if not args.pool_process:
                workers.remove(victim)
                workers.append(
                    Worker("tests.apps.basic", {}, queues=queue, name=unique("lv-")).wait_ready()
                )
    finally:
        for worker in workers:
            worker.kill()
        basic.durable.store.dispose()
        drop_tables(PG_URL, prefix)
    what = "pool process" if args.pool_process else "worker"
    print(
        f"liveness: broker={args.broker} kill={what} lease={LEASE}s "
        f"poll={args.poll_interval}s kills={len(figures)} "
        f"p50={statistics.median(figures):.2f}s max={max(figures):.2f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
