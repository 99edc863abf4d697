"""A cd.map of 10,000 items on real workers: it completes, in order, with each item run
once; the time and the workers' peak RSS are reported (not asserted: a shared machine).

Run it alone with ``-s`` to see the figures.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from celery_durable import WorkflowStatus
from tests.conftest import GPU_QUEUE
from tests.support.workers import Worker

ITEMS = 10_000


def peak_rss_mib(worker: Worker) -> float:
    """The largest peak RSS (VmHWM) among the worker's pool processes (the main process,
    which runs no task, left out)."""
    group = os.getpgid(worker.proc.pid)
    peak = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == worker.proc.pid:
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile
    return peak / 1024


@pytest.mark.timeout(900)
def test_a_map_of_ten_thousand_items(basic_app, start_worker, key):
    # A dispatch grace longer than the queue takes to drain: no redundant re-dispatches.
    env = {"CELERY_DURABLE_DISPATCH_GRACE": "120"}
    default, gpu = start_worker.together(
        {"name": "scale-default", "env": env},
        {"name": "scale-gpu", "env": env, "queues": GPU_QUEUE},
    )
    idle = peak_rss_mib(default), peak_rss_mib(gpu)
    started = time.monotonic()
    handle = basic_app.squares.delay(ITEMS)
    assert handle.get(timeout=900) == sum(n * n for n in range(ITEMS))
    elapsed = time.monotonic() - started
    assert handle.status() is WorkflowStatus.SUCCEEDED
    rows = basic_app.durable.runtime.store.fanout.list_items(handle.id)
    assert len(rows) == ITEMS and all(r.status == "ok" and r.attempts == 1 for r in rows)
    report = (
        f"\n10,000-item cd.map: {elapsed:.1f} s ({ITEMS / elapsed:.0f} items/s); peak RSS: "
        f"default-queue worker {peak_rss_mib(default):.0f} MiB (idle {idle[0]:.0f}), "
        f"gpu worker {peak_rss_mib(gpu):.0f} MiB (idle {idle[1]:.0f})"
    )
    print(report)  # pool processes' peak RSS; "idle": before the workflow started
