"""Scale figures: throughput against the worker's pool and concurrency, two workers against
one, the Postgres connections each worker holds, and a realistic-work figure (steps that wait
on I/O against a plain task waiting as long).

Every configuration gets fresh workers; the throughput figures are the suite's one method
(``throughput.compare``: interleaved rounds, medians), the headline's too. Each worker
connects to Postgres
with its own ``application_name`` (``<run tag>/<worker>``), so ``pg_stat_activity`` tells
which worker holds which connection.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from benchmarks import app as bench
from benchmarks import measure
from benchmarks.db import libpq_url
from benchmarks.measure import Bench
from benchmarks.throughput import (
    Method,
    compare,
    durable_kind,
    method_for,
    plain_kind,
    spread,
)
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
    method: Method,
    sampler: ConnectionSampler,
    progress: Callable[[str], None],
    io: Method | None = None,
) -> dict[str, Any]:
    """Fresh workers of ``config``; plain no-op tasks against each workflow (the suite's
    one method, ``throughput.compare``), then the connections they held at start, busy
    (peak during an untimed batch of each workflow) and idle after; with ``io`` the
    realistic-work comparison too."""
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
        flows = present(WORKFLOWS)
        kinds = [plain_kind()] + [durable_kind(name, flow) for name, flow in flows]
        result = compare(b, method, kinds)
        plain = result["kinds"]["plain"]
        durable = {name: result["kinds"][name] for name, _ in flows}
        # Connections: sampled during an untimed batch, so that the timed ones are the
        # same measurement as the headline's (no sampler thread in the driver).
        with sampler:
            for _, flow in flows:
                measure.durable_throughput(b, method.warmup, workflow=flow)
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
            "order": result["order"],
            "connections": {
                "at_start": at_start,
                "busy_peak": busy,
                "busy_peak_total": busy_total,
                "idle": idle,
                "per_worker_busy": max(busy.values(), default=0),
                "per_worker_idle": max(idle.values(), default=0),
            },
        }
        rates = ", ".join(
            f"{k} {v['rate_per_s']:.0f}/s ({spread(v)} x plain)" for k, v in durable.items()
        )
        progress(
            f"scale {config.label}: plain {plain['rate_per_s']:.0f}/s, {rates}; "
            f"connections per worker busy {out['connections']['per_worker_busy']}, "
            f"idle {out['connections']['per_worker_idle']}"
        )
        if io is not None:
            out["io"] = realistic_work(b, io)
            progress(f"scale realistic work on {config.label}: {describe_io(out['io'])}")
        return out
    finally:
        for worker in workers:
            worker.stop()


def realistic_work(b: Bench, method: Method) -> dict[str, Any]:
    """``io_task`` (15 ms of I/O) against each 3-step workflow of 5 ms I/O steps, by the
    suite's one method. overhead = the time per item over the plain task's - 1, the
    median of the rounds' (1 / ratio - 1), with its range."""
    flows = present(IO_WORKFLOWS)
    kinds = [plain_kind("io_task", bench.io_task)] + [durable_kind(n, f) for n, f in flows]
    result = compare(b, method, kinds)
    durable: dict[str, Any] = {}
    for name, _ in flows:
        x = result["kinds"][name]
        overheads = [1.0 / ratio - 1.0 for ratio in x["ratios"]]
        x["overhead"] = statistics.median(overheads)
        x["overhead_min"], x["overhead_max"] = min(overheads), max(overheads)
        durable[name] = x
    return {
        "io_wait_s": bench.IO_WAIT_S,
        "steps": 3,
        "method": result["method"],
        "order": result["order"],
        "plain": result["kinds"]["io_task"],
        "durable": durable,
    }


def describe_io(io: dict[str, Any]) -> str:
    parts = [f"plain {io['plain']['rate_per_s']:.0f}/s"] + [
        f"{name} {x['rate_per_s']:.0f}/s (overhead {x['overhead']:+.1%}, "
        f"rounds {x['overhead_min']:+.1%} to {x['overhead_max']:+.1%})"
        for name, x in io["durable"].items()
    ]
    return ", ".join(parts)


def run(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    progress: Callable[[str], None],
    quick: bool,
    method: Method | None = None,
) -> dict[str, Any]:
    """Every configuration in turn (quick: fewer, smaller batches), each by ``method``
    (default: the run's, ``throughput.method_for``); the realistic-work figure on the
    standard worker, in as many rounds."""
    method = method or method_for(quick)
    io_method = method_for(quick, io=True, rounds=method.rounds)
    started = time.monotonic()
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    sampler = ConnectionSampler(env[DATABASE_URL_VAR], b.tag)
    configs: list[dict[str, Any]] = []
    try:
        for config in QUICK_CONFIGS if quick else CONFIGS:
            configs.append(
                run_config(
                    b,
                    config,
                    env,
                    log_dir,
                    method,
                    sampler,
                    progress,
                    io=io_method if config == STANDARD else None,
                )
            )
    finally:
        sampler.close()
    io = next(c.pop("io") for c in configs if "io" in c)
    return {
        "n": method.n,
        "io_n": io_method.n,
        "method": {"throughput": asdict(method), "io": asdict(io_method)},
        "workflows": [name for name, _ in present(WORKFLOWS)],
        "configs": configs,
        "io_config": STANDARD.label,
        "io": io,
        "loadavg_start": loadavg_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": time.monotonic() - started,
    }
