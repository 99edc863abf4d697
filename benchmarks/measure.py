"""The measurements. Each returns plain numbers plus the details that explain them."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import chain
from celery.result import AsyncResult, ResultSet

from benchmarks import app as bench
from benchmarks import cpu
from benchmarks.db import Monitor
from benchmarks.windows import Window, commit_window, idle_window
from benchmarks.workers import wait_until
from celery_durable import WorkflowStatus


@dataclass
class Bench:
    """What the measurements share: the run's ids, the driver's connections, result ids."""

    run_id: str
    tag: str
    monitor: Monitor
    rds: redis.Redis
    result_ids: list[str] = field(default_factory=list)
    worker_groups: set[int] = field(default_factory=set)

    def key(self, label: str) -> str:
        """A Redis key prefix unique to this run and call."""
        return f"bench:{self.run_id}:{label}:{uuid.uuid4().hex[:8]}"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (``q`` in 0..100), as numpy's default."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no samples")
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(samples_s: list[float]) -> dict[str, Any]:
    ms = [s * 1000.0 for s in samples_s]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms),
        "min_ms": min(ms),
        "max_ms": max(ms),
    }


def _epoch(value: dt.datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def _cpu_per_item(b: Bench, before: cpu.Snapshot, n: int, elapsed: float) -> dict[str, Any]:
    spent = cpu.delta(before, cpu.snapshot(b.monitor.database), b.worker_groups)
    return {
        "cpu_ms_per_item": {k: v * 1000.0 / n for k, v in spent.items()},
        "cpu_cores_busy": sum(spent.values()) / elapsed,
        "other_cores_busy": spent["other"] / elapsed,
    }


def _remember(b: Bench, result: AsyncResult) -> None:
    node: AsyncResult | None = result
    while node is not None:
        b.result_ids.append(node.id)
        node = node.parent


# -- plain Celery ---------------------------------------------------------------------------


def _plain_batch(b: Bench, n: int, make: Callable[[], AsyncResult]) -> dict[str, Any]:
    """Start ``n`` with ``make()``, wait for every result; clock: first start to the last
    result's ``date_done`` (stored by the worker when the last task finished)."""
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    results = [make() for _ in range(n)]
    published = time.time()
    ResultSet(results).join(timeout=max(120.0, n / 20.0), interval=0.01)
    seen = time.time()
    usage = _cpu_per_item(b, before, n, seen - start)
    for result in results:
        _remember(b, result)
    last = max(_epoch(r.date_done) for r in results)
    elapsed = last - start
    return {
        "n": n,
        "elapsed_s": elapsed,
        "rate_per_s": n / elapsed,
        "publish_s": published - start,
        "driver_saw_last_after_s": seen - start,
        **usage,
    }


def plain_tasks(b: Bench, n: int, task: Any = None) -> dict[str, Any]:
    """N ``noop.delay()`` (or ``task.delay()``), then every result."""
    return _plain_batch(b, n, (task or bench.noop).delay)


def plain_chains(b: Bench, n: int) -> dict[str, Any]:
    """N ``chain(noop.s(), noop.s(), noop.s())``, then every chain's final result."""

    def make() -> AsyncResult:
        return chain(bench.noop.s(), bench.noop.s(), bench.noop.s()).apply_async()

    return _plain_batch(b, n, make)


def plain_latency(b: Bench, samples: int, chained: bool) -> dict[str, Any]:
    """One at a time: ``.delay()`` (or a 3-task chain) then ``AsyncResult.get()``."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        if chained:
            result = chain(bench.noop.s(), bench.noop.s(), bench.noop.s()).apply_async()
        else:
            result = bench.noop.delay()
        result.get(timeout=30)
        times.append(time.perf_counter() - started)
        _remember(b, result)
    return summary_ms(times)


# -- durable --------------------------------------------------------------------------------


def wait_finished(b: Bench, ids: list[str], timeout: float, interval: float = 0.1) -> None:
    """Poll the runs table until every run in ``ids`` finished (index lookups of the
    still-unfinished ids only)."""
    pending = list(ids)

    def done() -> bool:
        nonlocal pending
        pending = b.monitor.unfinished(pending)
        return not pending

    wait_until(done, timeout, interval, lambda: f"{len(pending)} of {len(ids)} runs to finish")


def durable_throughput(
    b: Bench,
    n: int,
    checkpoint: bool = False,
    workflow: Any = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """N ``three_steps.delay()`` (or ``workflow``'s; with ``options``, ``apply_async(
    **options)``); wait by polling the runs table; clock: first start to the last run's
    ``finished_at`` (database clock, same host). ``checkpoint``: issue a CHECKPOINT first,
    so the measurement does not pay for flushing earlier writes. ``reporting``: how many
    runs report to the result backend when they settle (``runs.canvas``)."""
    workflow = workflow or bench.three_steps
    begin = (lambda: workflow.apply_async(**options)) if options else workflow.delay
    if checkpoint:
        b.monitor.execute("CHECKPOINT")
    wal_before = b.monitor.wal_position()
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    ids = [begin().id for _ in range(n)]
    published = time.time()
    wait_finished(b, ids, timeout=max(120.0, n / 10.0))
    seen = time.time()
    usage = _cpu_per_item(b, before, n, seen - start)
    wal_bytes = b.monitor.wal_position() - wal_before
    b.result_ids.extend(ids)  # the runs' result-backend entries, deleted at the clean-up
    succeeded = b.monitor.count_status(ids, "SUCCEEDED")
    if succeeded != n:
        raise RuntimeError(f"only {succeeded} of {n} durable runs succeeded")
    elapsed = b.monitor.last_finished_at(ids) - start
    return {
        "n": n,
        "elapsed_s": elapsed,
        "rate_per_s": n / elapsed,
        "publish_s": published - start,
        "driver_saw_last_after_s": seen - start,
        "checkpoint_first": checkpoint,
        "wal_bytes_per_item": wal_bytes / n,
        "reporting": b.monitor.count_reporting(ids),
        **usage,
    }


def durable_latency(samples: int) -> dict[str, Any]:
    """One at a time: ``three_steps.delay()`` then ``handle.get()`` (LISTEN/NOTIFY)."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        bench.three_steps.delay().get(timeout=30)
        times.append(time.perf_counter() - started)
    return summary_ms(times)


def _marks(b: Bench, key: str, label: str) -> list[float]:
    return [float(v) for v in b.rds.lrange(f"{key}:{label}", 0, -1)]


def replay_cost(b: Bench, k: int, reps: int) -> dict[str, Any]:
    """A run records ``k`` steps and fails; attempt 2 replays them from history and runs
    step k+1. Measured from attempt 2's task_prerun (just before the claim) to step k+1's
    start, both ``time.time()`` in the worker."""
    samples = []
    for _ in range(reps):
        key = b.key("replay")
        bench.replay.delay(key, k).get(timeout=120)
        prerun = _marks(b, key, "prerun")
        body, first_done, stamp = (_marks(b, key, x)[0] for x in ("body", "first_done", "stamp"))
        if len(prerun) != 2:
            raise RuntimeError(f"expected 2 attempts of the replay run, saw {len(prerun)}")
        samples.append(
            {
                "replay_ms": (stamp - prerun[1]) * 1000.0,
                "claim_and_load_history_ms": (body - prerun[1]) * 1000.0,
                "replay_loop_ms": (stamp - body) * 1000.0,
                "first_execution_ms": (first_done - prerun[0]) * 1000.0,
                "retry_gap_ms": (prerun[1] - first_done) * 1000.0,
            }
        )
    result: dict[str, Any] = {"k": k, "reps": reps, "samples": samples}
    for name in samples[0]:
        result[f"median_{name}"] = statistics.median(s[name] for s in samples)
    return result


def signal_latency(b: Bench, samples: int) -> dict[str, Any]:
    """Start ``signalled``, wait for WAITING, then time ``handle.signal()`` to the start of
    the next step (its ``time.time()`` in Redis)."""
    times = []
    for i in range(samples):
        key = b.key("signal")
        handle = bench.signalled.delay(key)
        wait_until(
            lambda h=handle: h.status() == WorkflowStatus.WAITING,  # type: ignore[misc]
            30.0,
            0.005,
            "the signal workflow to wait",
        )
        sent = time.time()
        handle.signal("go", {"i": i})
        popped = b.rds.blpop([f"{key}:stamp"], timeout=30)
        if popped is None:
            raise TimeoutError("the step after the signal did not start within 30 s")
        times.append(float(popped[1]) - sent)
        handle.get(timeout=30)
    return summary_ms(times)


# -- commits ----------------------------------------------------------------------------------


def deferred_commits(b: Bench, workflows: int, idle_rate: float) -> dict[str, Any]:
    """Commits per ``three_deferred`` workflow, start included, measured as
    ``commits_per_workflow`` does (net of the idle rate)."""

    def workload() -> None:
        ids = [bench.three_deferred.delay().id for _ in range(workflows)]
        wait_finished(b, ids, timeout=120.0, interval=0.2)

    window = commit_window(b, workload)
    per_workflow = (window.others - idle_rate * window.seconds) / workflows
    return {
        "workflows_per_window": workflows,
        "commits_per_workflow": per_workflow,
        "commits_per_workflow_beyond_start": per_workflow - 1.0,
        "window": window.as_dict(),
        "clean": window.clean,
    }


def commits_per_workflow(
    b: Bench, workflows: int, idle_seconds: float, attempts: int = 3
) -> dict[str, Any]:
    """Commits of ``workflows`` runs of 3 and of 10 steps (``Window``: committed
    transaction ids).

    net = commits − idle rate × window, where the idle rate is measured with the workers
    idle, before and after. A window that is not clean (another program opened a session
    here, or was busy in another database) is measured again (up to ``attempts`` times) and
    flagged.
    """
    idle_before = idle_window(b, idle_seconds, attempts)
    final: dict[int, Window] = {}
    windows: list[dict[str, Any]] = []
    for steps in (3, 10):

        def workload(steps: int = steps) -> None:
            ids = [bench.k_steps.delay(steps).id for _ in range(workflows)]
            wait_finished(b, ids, timeout=120.0, interval=0.2)

        for attempt in range(1, attempts + 1):
            window = commit_window(b, workload)
            windows.append({"steps": steps, "attempt": attempt, **window.as_dict()})
            final[steps] = window
            if window.clean:
                break
    idle_after = idle_window(b, idle_seconds, attempts)
    idle_rate = (idle_before.others + idle_after.others) / (
        idle_before.seconds + idle_after.seconds
    )
    per_workflow = {
        steps: (window.others - idle_rate * window.seconds) / workflows
        for steps, window in final.items()
    }
    per_step = (per_workflow[10] - per_workflow[3]) / 7.0
    fixed = per_workflow[3] - 3 * per_step
    clean = all(w.clean for w in (*final.values(), idle_before, idle_after))
    return {
        "workflows_per_window": workflows,
        "commits_per_workflow_3_steps": per_workflow[3],
        "commits_per_workflow_10_steps": per_workflow[10],
        "commits_per_step": per_step,
        "commits_per_workflow_fixed": fixed,
        "idle_commits_per_s": idle_rate,
        "idle_windows": [idle_before.as_dict(), idle_after.as_dict()],
        "windows": windows,
        "clean": clean,
    }


def hot_path_commits(
    b: Bench, workflows: int, idle_seconds: float, progress: Callable[[str], None]
) -> None:
    """``--hot-path-only``'s second half: the commits of strict and deferred workflows, as
    the full run measures them, printed on the worker that just ran the throughput."""
    strict = commits_per_workflow(b, workflows, idle_seconds)
    progress(
        f"commits: {strict['commits_per_workflow_3_steps']:.2f}/3-step workflow, "
        f"{strict['commits_per_step']:.2f}/step, {strict['commits_per_workflow_fixed']:.2f} "
        f"fixed{'' if strict['clean'] else ' (NOT CLEAN)'}"
    )
    deferred = deferred_commits(b, workflows, strict["idle_commits_per_s"])
    progress(
        f"commits, deferred: {deferred['commits_per_workflow']:.2f}/3-deferred-step workflow "
        f"({deferred['commits_per_workflow_beyond_start']:.2f} beyond the start)"
        f"{'' if deferred['clean'] else ' (NOT CLEAN)'}"
    )
