"""A map of 100,000 no-op items with ``batch_size="auto"`` (issue 26): it completes;
the time from the start to the run's end, the peak RSS of the worker (its main process
and each pool process) and of this driver, and the messages every process published.

    python -m benchmarks --bigmap-only           # the phase of the full run, alone
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.services import PG_URL, REDIS_URL, drop_tables, unique

# The phase of ``python -m benchmarks`` (after the fan-out): this many items, quick or not.
ITEMS, QUICK_ITEMS = 100_000, 2_000


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


def run(progress: Callable[[str], None], quick: bool = False) -> dict[str, Any]:
    """The phase: a process of its own (its driver's peak RSS is the map's alone, and the
    app counts what it publishes only there), with tables, queue and worker of its own."""
    items = QUICK_ITEMS if quick else ITEMS
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "benchmarks.bigmap", "--items", str(items)]
        subprocess.run([*command, "--json", out.name], check=True, stdout=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    progress(describe(result))
    return result


def describe(x: dict[str, Any]) -> str:
    """One line: time, messages, peak RSS."""
    rss = x.get("worker_peak_rss_mib", {})
    return (
        f"bigmap: {x['items']:,} items, batch_size='auto': {x.get('seconds', 0):.1f} s "
        f"({x.get('items_per_s', 0):.0f} items/s, {x.get('status')}); messages published "
        f"{x.get('messages_published')}; peak RSS worker "
        + ", ".join(f"{v:.0f}" for v in rss.values())
        + f" MiB (main, pool processes), driver {x.get('driver_peak_rss_mib', 0):.0f} MiB"
    )


def bigmap_figures(r: dict[str, Any]) -> list[Any]:
    """The figures of the phase (none if the run had none)."""
    from benchmarks.render import Figure

    x = r.get("bigmap")
    if not x or "seconds" not in x:
        return []
    label = f"cd.map of {x['items']:,} no-op items, batch_size='auto'"
    rss = list(x["worker_peak_rss_mib"].values())
    return [
        Figure("bigmap_seconds", f"{label}: time", x["seconds"], "s", note=x["status"]),
        Figure("bigmap_items_per_s", f"{label}: throughput", x["items_per_s"], "items/s"),
        Figure(
            "bigmap_messages",
            f"{label}: messages published",
            x["messages_published"],
            "messages",
            note=f"every process; one task per item would be {x['items']:,}",
        ),
        Figure(
            "bigmap_worker_rss",
            f"{label}: worker peak RSS, largest process",
            max(rss),
            "MiB",
            note="main, pool processes: " + ", ".join(f"{v:.0f}" for v in rss),
        ),
        Figure("bigmap_driver_rss", f"{label}: driver peak RSS", x["driver_peak_rss_mib"], "MiB"),
    ]


def bigmap_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 26: the map completes (the figures are reported, not bounded)."""
    x = r.get("bigmap")
    if not x:
        return []
    done = x.get("status") == "SUCCEEDED"
    return [
        {
            "target": f"cd.map of {x['items']:,} items, batch_size='auto', completes (s)",
            "value": x.get("seconds", 0.0),
            "op": "completes",
            "threshold": 0.0,
            "pass": done,
            "note": f"{x.get('status')}; {x.get('messages_published')} messages published",
        }
    ]


def run_only(
    args: Any, machine: dict[str, Any], progress: Callable[[str], None], wall_start: float
) -> int:
    """``python -m benchmarks --bigmap-only``: the phase alone; prints its figures and
    target, writes the JSON."""
    from benchmarks.render import write_json

    r = {"bigmap": run(progress, args.quick)}
    figures = bigmap_figures(r)
    doc = {
        "schema": 1,
        "started_at": wall_start,
        "bigmap_only": True,
        "quick": args.quick,
        "machine": {**machine, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "figures": {f.name: f.as_dict() for f in figures},
        "targets": bigmap_targets(r),
        "raw": r,
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    write_json(doc, args.json)
    for f in figures:
        print(f"{f.label}: {f.value:,.1f} {f.unit}" + (f"  ({f.note})" if f.note else ""))
    for t in doc["targets"]:
        print(f"[{'PASS' if t['pass'] else 'FAIL'}] {t['target']}: {t['value']:.1f}  ({t['note']})")
    return 0


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
        bench.durable.runtime.store.dispose()
        drop_tables(PG_URL, prefix)
    print(describe(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
