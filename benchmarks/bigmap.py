"""A map of 100,000 no-op items with ``batch_size="auto"`` (issue 26): it completes;
the time from the start to the run's end, the peak RSS of the worker (its main process
and each pool process) and of this driver, and the messages every process published.

    python -m benchmarks.bigmap                  # 100,000 items, one worker -P prefork -c 2
    python -m benchmarks.bigmap --items 10000

The worker runs the benchmark app (``benchmarks/app.py``) on Redis with the durable store on
Postgres; ``BENCH_COUNT_PUBLISHED`` makes every process of it (and this one) count what it
publishes, in Redis. Peak RSS is each process's ``VmHWM`` (``/proc/<pid>/status``), read
just before the worker is stopped; the driver's is its own ``ru_maxrss``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.services import PG_URL, REDIS_URL, drop_tables, unique


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bigmap")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    prefix, queue, counter = unique("bm")[:9] + "_", unique("bmq-"), unique("bm-published-")
    env = {
        "CELERY_DURABLE_DATABASE_URL": PG_URL,
        "CELERY_DURABLE_TABLE_PREFIX": prefix,
        "CELERY_DURABLE_NAMESPACE": unique("bmns-"),
        "BENCH_BROKER_URL": REDIS_URL,
        "BENCH_REDIS_URL": REDIS_URL,
        "BENCH_QUEUE": queue,
        "BENCH_COUNT_PUBLISHED": counter,
    }
    for name in ("LOCK_TIMEOUT", "POLL_INTERVAL", "DISPATCH_GRACE"):
        os.environ.pop(f"CELERY_DURABLE_{name}", None)  # the library's defaults
    os.environ.update(env)
    from benchmarks import app as bench  # reads the settings above
    from benchmarks.workers import WorkerProcess

    bench.durable.migrate()
    worker = WorkerProcess(unique("bigmap-"), env, Path(tempfile.mkdtemp(prefix="bigmap-")))
    result: dict[str, Any] = {"items": args.items, "batch_size": "auto"}
    try:
        worker.wait_ready()
        started = time.monotonic()
        handle = bench.batched_map.delay(args.items, "auto")
        assert handle.get(timeout=args.timeout) == args.items
        result["seconds"] = time.monotonic() - started
        result["items_per_s"] = args.items / result["seconds"]
        pids = [worker.proc.pid, *children_of(worker.proc.pid)]
        result["worker_peak_rss_mib"] = {str(pid): peak_rss_mib(pid) for pid in pids}
        result["driver_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result["messages_published"] = int(bench._redis.get(counter) or 0)
        record = handle.record()
        result["status"] = record.status
    finally:
        worker.stop()
        bench._redis.delete(counter)
        bench.durable.store.dispose()
        drop_tables(PG_URL, prefix)
    rss = result.get("worker_peak_rss_mib", {})
    print(
        f"bigmap: {args.items:,} items, batch_size='auto': {result.get('seconds', 0):.1f} s "
        f"({result.get('items_per_s', 0):.0f} items/s); messages published "
        f"{result.get('messages_published')}; peak RSS worker "
        + ", ".join(f"{v:.0f}" for v in rss.values())
        + f" MiB (main, pool processes), driver {result.get('driver_peak_rss_mib', 0):.0f} MiB",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
