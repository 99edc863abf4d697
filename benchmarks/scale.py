"""Scale figures: throughput against the worker's pool and concurrency, two workers against
one, the Postgres connections each worker holds, and a realistic-work figure (steps that wait
on I/O against a plain task waiting as long).

Every configuration gets fresh workers; the measurements are the suite's own
(``measure.plain_tasks``, ``measure.durable_throughput``). Each worker connects to Postgres
with its own ``application_name`` (``<run tag>/<worker>``), so ``pg_stat_activity`` tells
which worker holds which connection.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from benchmarks import app as bench
from benchmarks import measure
from benchmarks.db import libpq_url
from benchmarks.measure import Bench
from benchmarks.workers import WorkerProcess

# The workflows measured in every configuration: those of these names that the app defines.
# Adding a workflow to benchmarks/app.py under one of these names puts it in the figures.
WORKFLOWS = ("three_steps", "three_deferred")
# The realistic-work workflows (3 steps of IO_WAIT_S each), compared with ``io_task``.
IO_WORKFLOWS = ("three_io", "three_io_deferred")
DATABASE_URL_VAR = "CELERY_DURABLE_DATABASE_URL"
# How often the sampler reads pg_stat_activity while the workers are busy.
SAMPLE_INTERVAL = 0.1
# Idle connections are counted this long after a batch: in-flight statements end first.
IDLE_AFTER_S = 1.0


@dataclass(frozen=True)
class Config:
    """``workers`` worker processes, each ``-P pool -c concurrency``."""

    pool: str
    concurrency: int
    workers: int = 1

    @property
    def label(self) -> str:
        one = f"-P {self.pool} -c {self.concurrency}"
        return one if self.workers == 1 else f"{self.workers} x ({one})"

    @property
    def slug(self) -> str:
        return f"{self.pool}{self.concurrency}x{self.workers}"


# The suite's standard worker (benchmarks.workers.worker_command's defaults): the
# realistic-work figure runs on it.
STANDARD = Config("prefork", 2)
CONFIGS = (
    Config("prefork", 1),
    STANDARD,
    Config("prefork", 4),
    Config("prefork", 8),
    Config("threads", 16),
    Config("prefork", 2, workers=2),
)
# Quick: one of each kind (prefork, threads, two workers), to keep the smoke run short.
QUICK_CONFIGS = (STANDARD, Config("threads", 16), Config("prefork", 2, workers=2))


@dataclass(frozen=True)
class Sizes:
    n: int
    warmup: int
    io_n: int


def sizes(quick: bool) -> Sizes:
    return Sizes(60, 10, 40) if quick else Sizes(1000, 50, 400)


def present(names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(name, workflow) of the ``names`` the app defines, in order."""
    return [(name, getattr(bench, name)) for name in names if hasattr(bench, name)]


def worker_env(env: Mapping[str, str], tag: str, name: str) -> dict[str, str]:
    """``env`` with the database URL's ``application_name`` set to ``<tag>/<name>``."""
    url = make_url(env[DATABASE_URL_VAR]).update_query_dict({"application_name": f"{tag}/{name}"})
    return {**env, DATABASE_URL_VAR: url.render_as_string(hide_password=False)}


class ConnectionSampler:
    """Counts the backends of each of the run's scale workers (by ``application_name``) on a
    connection of its own, once on ``count()`` or, inside ``with``, every SAMPLE_INTERVAL
    in a thread, keeping each worker's and the total's peak."""

    def __init__(self, database_url: str, tag: str) -> None:
        self.prefix = f"{tag}/"
        # Tagged differently from the workers' prefix so that it never counts itself.
        url = make_url(database_url).update_query_dict({"application_name": f"{tag}-sampler"})
        self.conn = psycopg.connect(
            libpq_url(url.render_as_string(hide_password=False)), autocommit=True
        )
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def count(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE starts_with(application_name, %s) GROUP BY 1",
            (self.prefix,),
        ).fetchall()
        return {str(name)[len(self.prefix) :]: int(n) for name, n in rows}

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            counts = self.count()
            for name, n in counts.items():
                self.peak[name] = max(self.peak.get(name, 0), n)
            self.peak_total = max(self.peak_total, sum(counts.values()))

    def __enter__(self) -> ConnectionSampler:
        self.peak, self.peak_total = {}, 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="pg-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def close(self) -> None:
        self.conn.close()


def _processes(worker: WorkerProcess) -> int:
    """The worker's main process and its pool children."""
    return 1 + len(worker.children())


def run_config(
    b: Bench,
    config: Config,
    env: Mapping[str, str],
    log_dir: Path,
    size: Sizes,
    sampler: ConnectionSampler,
    progress: Callable[[str], None],
    io: bool = False,
) -> dict[str, Any]:
    """Fresh workers of ``config``; plain no-op tasks, then each workflow, the connections
    they held at start, busy (peak while the durable batches ran) and idle after; with
    ``io`` the realistic-work pair too."""
    names = [f"scale-{config.slug}-{i}" for i in range(config.workers)]
    workers: list[WorkerProcess] = []
    try:
        for name in names:
            workers.append(
                WorkerProcess(
                    f"bench-{b.run_id}-{name}",
                    worker_env(env, b.tag, name),
                    log_dir,
                    config.pool,
                    config.concurrency,
                )
            )
        for worker in workers:
            b.worker_groups.add(worker.proc.pid)  # their CPU counts as the worker's
            worker.wait_ready()
        at_start = sampler.count()
        measure.plain_tasks(b, size.warmup)
        plain = measure.plain_tasks(b, size.n)
        durable: dict[str, Any] = {}
        with sampler:
            for name, workflow in present(WORKFLOWS):
                measure.durable_throughput(b, size.warmup, workflow=workflow)
                durable[name] = measure.durable_throughput(
                    b, size.n, checkpoint=True, workflow=workflow
                )
        busy, busy_total = dict(sampler.peak), sampler.peak_total
        time.sleep(IDLE_AFTER_S)
        idle = sampler.count()
        out: dict[str, Any] = {
            "label": config.label,
            "pool": config.pool,
            "concurrency": config.concurrency,
            "workers": config.workers,
            "processes_per_worker": [_processes(w) for w in workers],
            "plain": plain,
            "durable": durable,
            "connections": {
                "at_start": at_start,
                "busy_peak": busy,
                "busy_peak_total": busy_total,
                "idle": idle,
                "per_worker_busy": max(busy.values(), default=0),
                "per_worker_idle": max(idle.values(), default=0),
            },
        }
        rates = ", ".join(f"{k} {v['rate_per_s']:.0f}/s" for k, v in durable.items())
        progress(
            f"scale {config.label}: plain {plain['rate_per_s']:.0f}/s, {rates}; "
            f"connections per worker busy {out['connections']['per_worker_busy']}, "
            f"idle {out['connections']['per_worker_idle']}"
        )
        if io:
            out["io"] = realistic_work(b, size)
            progress(f"scale realistic work on {config.label}: {describe_io(out['io'])}")
        return out
    finally:
        for worker in workers:
            worker.stop()


def realistic_work(b: Bench, size: Sizes) -> dict[str, Any]:
    """``io_task`` (15 ms of I/O) against each 3-step workflow of 5 ms I/O steps.

    overhead = plain throughput / durable throughput - 1: the extra time per item that the
    durable workflow takes, in the same worker."""
    measure.plain_tasks(b, size.warmup, task=bench.io_task)
    plain = measure.plain_tasks(b, size.io_n, task=bench.io_task)
    durable: dict[str, Any] = {}
    for name, workflow in present(IO_WORKFLOWS):
        measure.durable_throughput(b, size.warmup, workflow=workflow)
        result = measure.durable_throughput(b, size.io_n, checkpoint=True, workflow=workflow)
        result["overhead"] = plain["rate_per_s"] / result["rate_per_s"] - 1.0
        durable[name] = result
    return {"io_wait_s": bench.IO_WAIT_S, "steps": 3, "plain": plain, "durable": durable}


def describe_io(io: dict[str, Any]) -> str:
    parts = [f"plain {io['plain']['rate_per_s']:.0f}/s"] + [
        f"{name} {x['rate_per_s']:.0f}/s (overhead {x['overhead']:+.1%})"
        for name, x in io["durable"].items()
    ]
    return ", ".join(parts)


def run(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    progress: Callable[[str], None],
    quick: bool,
) -> dict[str, Any]:
    """Every configuration in turn (quick: fewer, smaller batches); the realistic-work
    figure on the standard worker."""
    size = sizes(quick)
    started = time.monotonic()
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    sampler = ConnectionSampler(env[DATABASE_URL_VAR], b.tag)
    configs: list[dict[str, Any]] = []
    try:
        for config in QUICK_CONFIGS if quick else CONFIGS:
            configs.append(
                run_config(b, config, env, log_dir, size, sampler, progress, io=config == STANDARD)
            )
    finally:
        sampler.close()
    io = next(c.pop("io") for c in configs if "io" in c)
    return {
        "n": size.n,
        "io_n": size.io_n,
        "workflows": [name for name, _ in present(WORKFLOWS)],
        "configs": configs,
        "io_config": STANDARD.label,
        "io": io,
        "loadavg_start": loadavg_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": time.monotonic() - started,
    }
