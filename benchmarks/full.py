"""The full run of ``python -m benchmarks``: every phase in turn on the run's private
queue, namespace and tables (set up by ``cli.main``), then the report and the JSON.

Example::

    full.run(Session(args, scale, method, env, ...))   # what ``python -m benchmarks`` does
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.housekeeping import cleanup, fill, other_celery_workers, profiled
from benchmarks.throughput import Method
from benchmarks.workers import WorkerProcess, worker_command

T = TypeVar("T")


@dataclass
class Session:
    """What ``cli.main`` set up for a run: its arguments and scale, its private names, the
    driver's handles, and how to start a worker (each started one is in ``workers``)."""

    args: Any
    scale: Any
    method: Method
    env: dict[str, str]
    run_id: str
    queue: str
    log_dir: Path
    b: Any
    monitor: Any
    rds: Any
    machine: dict[str, Any]
    wall_start: float
    progress: Callable[[str], None]
    start_worker: Callable[[str], WorkerProcess]
    workers: list[WorkerProcess]


def run(session: Session) -> int:
    """Every phase, the report printed, the JSON written."""
    # Imported here: the app reads the run's environment at import.
    from benchmarks import (
        aio,
        batches,
        bigmap,
        fanout,
        limits,
        liveness,
        longlived,
        measure,
        operations,
        scale_report,
        throughput,
    )
    from benchmarks import app as bench
    from benchmarks import scale as scaling
    from benchmarks.report import METHODS, build_figures, build_targets, render, write_json

    s = session
    args, scale, method, env, log_dir = s.args, s.scale, s.method, s.env, s.log_dir
    b, monitor, rds, machine, progress = s.b, s.monitor, s.rds, s.machine, s.progress
    run_id, queue, wall_start = s.run_id, s.queue, s.wall_start
    start_worker, workers = s.start_worker, s.workers
    r: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], T], show: Callable[[T], str]) -> T:
        value = fn()
        progress(f"{name}: {show(value)}")
        return value

    def lat(x: dict[str, Any]) -> str:
        return f"p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms"

    try:
        bench.durable.migrate()
        machine["other_celery_workers_start"] = other_celery_workers(set())
        # -- plain Celery latency ----------------------------------------------------------
        plain = start_worker("plain")
        measure.plain_latency(b, 5, chained=False)
        r["plain_task_latency"] = step(
            "plain task latency",
            lambda: measure.plain_latency(b, scale.latency_samples, chained=False),
            lat,
        )
        r["plain_chain_latency"] = step(
            "plain chain latency",
            lambda: measure.plain_latency(b, scale.latency_samples, chained=True),
            lat,
        )
        plain.stop()
        workers.remove(plain)
        # -- throughput: plain against durable, the suite's one method (as the scale rows) --
        durable = start_worker("durable")
        with profiled(durable, args.py_spy):
            r["throughput"] = step(
                "throughput (empty tables)",
                lambda: throughput.compare(
                    b,
                    method,
                    [
                        throughput.plain_kind("plain_tasks"),
                        throughput.chain_kind("plain_chains"),
                        throughput.durable_kind("three_steps"),
                        throughput.no_backend_kind(),  # beside it: the closest rounds
                        throughput.durable_kind("three_deferred"),
                    ],
                ),
                throughput.describe,
            )
        kinds = r["throughput"]["kinds"]
        r["plain_tasks"], r["plain_chains"] = kinds["plain_tasks"], kinds["plain_chains"]
        r["durable_empty"], r["deferred_empty"] = kinds["three_steps"], kinds["three_deferred"]
        r["durable_no_backend"] = kinds[throughput.NO_BACKEND]
        r["backend_report"] = throughput.backend_report(r["throughput"])
        measure.durable_latency(5)
        r["durable_latency"] = step(
            "durable latency", lambda: measure.durable_latency(scale.latency_samples), lat
        )
        r["replay"] = step(
            "replay",
            lambda: measure.replay_cost(b, scale.replay_steps, scale.replay_reps),
            lambda x: f"{x['median_replay_ms']:.1f} ms for {x['k']} steps",
        )
        r["signal_latency"] = step(
            "signal -> resume", lambda: measure.signal_latency(b, scale.signal_samples), lat
        )
        r["commits"] = step(
            "commits",
            lambda: measure.commits_per_workflow(
                b, scale.commit_workflows, scale.idle_seconds, scale.commit_attempts
            ),
            lambda x: (
                f"{x['commits_per_workflow_3_steps']:.2f}/3-step workflow, "
                f"{x['commits_per_step']:.2f}/step, {x['commits_per_workflow_fixed']:.2f} fixed"
                f"{'' if x['clean'] else ' (NOT CLEAN)'}"
            ),
        )
        r["deferred_commits"] = step(
            "commits, deferred",
            lambda: measure.deferred_commits(
                b, scale.commit_workflows, r["commits"]["idle_commits_per_s"]
            ),
            lambda x: (
                f"{x['commits_per_workflow']:.2f}/3-deferred-step workflow "
                f"({x['commits_per_workflow_beyond_start']:.2f} beyond the start)"
                f"{'' if x['clean'] else ' (NOT CLEAN)'}"
            ),
        )
        # -- flow control: ample limiters against none, backlogs, the rate (same worker) --
        r["limits"] = limits.run(
            b,
            method,
            limits.scale_for(args.quick, scale.commit_workflows),
            r["commits"]["idle_commits_per_s"],
            progress,
        )
        # -- async bodies against sync ones, a gather, an asyncio producer (same worker) ----
        r["async"] = aio.run(b, method, aio.scale_for(args.quick), progress)
        r["fill"] = fill(monitor, scale, queue)
        progress(f"filled {scale.fill_runs:,} finished runs in {r['fill']['seconds']:.1f}s")
        r["throughput_filled"] = step(
            f"throughput ({scale.fill_runs:,} finished runs)",
            lambda: throughput.compare(
                b,
                method,
                [throughput.plain_kind("plain_tasks"), throughput.durable_kind("three_steps")],
            ),
            throughput.describe,
        )
        r["durable_filled"] = r["throughput_filled"]["kinds"]["three_steps"]
        r["operations"] = step(
            f"operations ({scale.fill_runs:,} finished runs)",
            lambda: operations.measure_operations(
                bench.durable, scale.ops_reps, bench.three_steps.name
            ),
            operations.describe,
        )
        machine["other_celery_workers_end"] = other_celery_workers({w.proc.pid for w in workers})
        durable.stop()
        workers.remove(durable)
        # -- fan-out: chord vs cd.map, then a SIGKILL of an item's worker, of a chord's -----
        r["fanout"] = fanout.run(
            b,
            start_worker,
            progress,
            scale.fanout_batch,
            scale.fanout_latency_samples,
            scale.fanout_commit_maps,
            r["commits"]["idle_commits_per_s"],
        )
        r["kill"] = step(
            "SIGKILL during a fan-out",
            lambda: fanout.kill_comparison(b, env, log_dir, scale.kill_items, scale.kill_deadline),
            lambda x: f"chord: {x['chord']['outcome']}; map: {x['map']['outcome']}",
        )
        r["kill_chord"] = step(
            "SIGKILL of a chord's header worker",
            lambda: fanout.chord_kill_comparison(b, env, log_dir, deadline=scale.kill_deadline),
            fanout.describe_chord_kill,
        )
        # -- a map of 100,000 items, batch_size="auto" (quick: 2,000), a process of its own --
        r["bigmap"] = bigmap.run(progress, args.quick)
        # -- recovery: a SIGKILL to the resumed step, both brokers (workers of their own) --
        if not args.quick:  # minutes of kills; tests/integration/test_benchmarks.py runs one
            r["liveness"] = liveness.run_all(progress)
        r["async"]["recovery"] = aio.recovery(aio.scale_for(args.quick), progress)  # quick: 1
        # -- long-lived: the sweeper among waiting runs, continue_as_new generations --------
        r["waiters"] = step(
            "waiting runs",
            lambda: longlived.waiters(bench.durable, rds, queue, scale.waiters, scale.ops_reps),
            longlived.describe_waiters,
        )
        r["continue_loop"] = step(
            "continue_as_new",
            lambda: longlived.continue_loop(bench.durable, scale.generations),
            longlived.describe_loop,
        )
        # -- scale: pools, concurrency, two workers, connections, realistic work --------
        r["scale"] = scaling.run(b, env, log_dir, progress, args.quick, method)
    finally:
        for worker in workers:
            worker.stop()
        try:
            fanout.drop_unacked(b, queue)
        except Exception as exc:  # noqa: BLE001 - clean-up reports and goes on
            print(f"could not drop unacked messages: {exc}", file=sys.stderr)
        cleanup(b, queue, bench.app)
        bench.durable.runtime.store.dispose()
        monitor.close()

    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    figures = build_figures(r)
    by_name = {f.name: f for f in figures}
    doc: dict[str, Any] = {
        "schema": 1,
        "run_id": run_id,
        "started_at": wall_start,
        "quick": args.quick,
        "n": scale.n,
        "throughput_method": asdict(method),
        "scale": asdict(scale),
        "machine": machine,
        "settings": {
            "worker_command": worker_command(f"bench-{run_id}-<role>")[1:],
            "app": "benchmarks.app: Redis broker, Redis result backend, task_acks_late=True, "
            "worker_prefetch_multiplier=1; durable defaults (lock_timeout 30 s, "
            "poll_interval 1 s) with a private namespace, table prefix and signal queue",
            "database_url": args.database_url,
            "broker": args.redis_url,
            "result_backend": args.result_backend,
            "py_spy": str(args.py_spy) if args.py_spy else None,
        },
        "figures": {f.name: f.as_dict() for f in figures},
        "targets": build_targets(by_name, r["commits"]["clean"])
        + operations.operations_targets(r)
        + longlived.longlived_targets(r)
        + limits.limits_targets(r)
        + batches.batches_targets(r["fanout"].get("batched"))
        + bigmap.bigmap_targets(r)
        + liveness.liveness_targets(r)
        + aio.async_targets(r),
        "methods": {**METHODS, **longlived.METHODS, **limits.METHODS, **aio.METHODS},
        "raw": r,
        "worker_logs": str(log_dir),
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    scale_report.add_to(doc, r["scale"], args.json.parent / "scale.png")
    write_json(doc, args.json)
    print(render(doc))
    return 0
