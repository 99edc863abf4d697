"""The suite's housekeeping: the 1,000,000-run fill, py-spy profiles, other workers on the
machine, and the clean-up of a run's tables and Redis keys.

Example::

    filled = fill(monitor, scale, queue)     # before the "filled" measurements
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.workers import WorkerProcess


def other_celery_workers(own_groups: set[int]) -> int:
    """Celery worker processes on this machine that are not this run's (interference)."""
    count = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            pgid = os.getpgid(int(proc.name))
        except OSError:
            continue
        if b"celery" in cmd and b" worker" in cmd and pgid not in own_groups:
            count += 1
    return count


def fill(monitor: Any, scale: Any, queue: str) -> dict[str, Any]:
    """The 1,000,000 finished runs (``--fill``; ``scale``: the cli's Scale), with what
    the fill took and made."""
    from benchmarks import app as bench

    started = time.monotonic()
    timings = monitor.fill_finished(
        scale.fill_runs,
        scale.fill_steps_per_run,
        bench.three_steps.name,
        bench.noop_step.name,
        queue,
        bench.k_steps.name,
    )
    return {
        "runs": scale.fill_runs,
        "steps_per_run": scale.fill_steps_per_run,
        **timings,
        "seconds": time.monotonic() - started,
        "rows_after": monitor.row_counts(),
        "sizes": monitor.table_sizes(),
    }


@contextmanager
def profiled(worker: WorkerProcess, out_dir: Path | None) -> Iterator[None]:
    """With ``out_dir``: py-spy records the worker's main and pool processes meanwhile."""
    if out_dir is None:
        yield
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    roles = [("main", worker.proc.pid)] + [
        (f"child{i}", pid) for i, pid in enumerate(worker.children())
    ]
    spies = [
        subprocess.Popen(
            ["py-spy", "record", "--pid", str(pid), "--rate", "200", "--nonblocking"]
            + ["-o", str(out_dir / f"{worker.name}-{role}.svg")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role, pid in roles
    ]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)


def cleanup(b: Any, queue: str, app: Any) -> None:
    """Drop the run's tables and delete its Redis keys (queues, timestamps, results)."""
    try:
        b.monitor.drop_tables()
    except Exception as exc:  # noqa: BLE001 - clean-up reports and goes on
        print(f"could not drop the tables: {exc}", file=sys.stderr)
    try:
        rds = b.rds
        for pattern in (f"bench:{b.run_id}:*", f"{queue}*", f"_kombu.binding*.{queue}*"):
            keys = list(rds.scan_iter(match=pattern, count=1000))
            for i in range(0, len(keys), 500):
                rds.delete(*keys[i : i + 500])
        client = app.backend.client
        ids = b.result_ids
        for i in range(0, len(ids), 500):
            client.delete(*(f"celery-task-meta-{x}" for x in ids[i : i + 500]))
    except Exception as exc:  # noqa: BLE001
        print(f"could not clean Redis up: {exc}", file=sys.stderr)
