"""``python -m benchmarks``: set up a private queue/namespace/tables, run, report, clean up."""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from sqlalchemy.engine import make_url

from benchmarks.housekeeping import cleanup, fill, other_celery_workers, profiled
from benchmarks.throughput import Method, method_for
from benchmarks.workers import WorkerProcess, worker_command

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_RESULT_BACKEND = "redis://127.0.0.1:6379/1"


@dataclass(frozen=True)
class Scale:
    """How much of everything one run does."""

    n: int
    warmup: int
    latency_samples: int
    replay_steps: int
    replay_reps: int
    commit_workflows: int
    idle_seconds: float
    fill_runs: int
    fill_steps_per_run: int
    signal_samples: int
    commit_attempts: int
    ops_reps: int
    fanout_batch: int
    fanout_latency_samples: int
    fanout_commit_maps: int
    kill_items: int
    kill_deadline: float
    waiters: int
    generations: int


def scale_for(quick: bool, method: Method, fill: int | None) -> Scale:
    """How much a run does; its throughput batches by ``method`` (``method_for``)."""
    if quick:
        base = Scale(
            100, 10, 10, 1000, 1, 20, 5.0, 20_000, 3, 5, 1, 5, 5, 5, 3, 20, 15.0, 5_000, 300
        )
    else:
        base = Scale(
            2000,
            100,
            100,
            1000,
            3,
            300,
            15.0,
            1_000_000,
            3,
            100,
            3,
            30,
            15,
            30,
            10,
            20,
            30.0,
            100_000,
            10_000,
        )
    # Throughput batches: the suite's one method (benchmarks.throughput), every phase.
    return Scale(
        **{
            **asdict(base),
            "n": method.n,
            "warmup": method.warmup,
            **({"fill_runs": fill} if fill is not None else {}),
        }
    )


def _positive(text: str) -> int:
    """An argument that counts something: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="celery_durable vs plain Celery benchmarks"
    )
    parser.add_argument(
        "--n", type=_positive, help="throughput batch size, every phase (default 1000, quick 60)"
    )
    parser.add_argument(
        "--rounds",
        type=_positive,
        help="interleaved rounds of every throughput comparison (default 3, quick 2)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (about a minute)")
    parser.add_argument(
        "--json", type=Path, default=RESULTS / "latest.json", help="where to write the JSON"
    )
    parser.add_argument("--fill", type=int, help="finished runs to insert (default 1,000,000)")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker and timestamps")
    parser.add_argument("--result-backend", default=DEFAULT_RESULT_BACKEND)
    parser.add_argument(
        "--log-dir", type=Path, default=RESULTS / "logs", help="worker logs go to DIR/<run id>/"
    )
    parser.add_argument(
        "--operations-only",
        action="store_true",
        help="only fill the tables and time the operations commands (list, stats); "
        "no workers, no throughput figures",
    )
    parser.add_argument(
        "--fanout-only",
        action="store_true",
        help="only the fan-out figures (chord vs cd.map: throughput, latency, commits); "
        "prints them, writes no report",
    )
    parser.add_argument(
        "--scale-only",
        action="store_true",
        help="only the scale figures (pools, two workers, connections, realistic work)",
    )
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the empty-table throughput comparison (plain, strict with and without "
        "the result backend's report, deferred); prints it, writes no report",
    )
    parser.add_argument(
        "--limits-only",
        action="store_true",
        help="only the limiter figures (throughput under ample limiters against none, "
        "commits, backlog dispatch, rate accuracy); prints them and writes the JSON",
    )
    parser.add_argument(
        "--liveness-only",
        action="store_true",
        help="only the recovery figures (SIGKILL of a worker or a pool process to the "
        "interrupted step's start elsewhere, both brokers, and plain acks_late anchors)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="record py-spy flame graphs of the durable worker's processes during the "
        "empty-table throughput comparison into DIR (those figures are then perturbed)",
    )
    return parser.parse_args(argv)


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    method = method_for(args.quick, args.n, rounds=args.rounds)
    scale = scale_for(args.quick, method, args.fill)
    progress = Progress()
    wall_start = time.time()
    run_id = uuid.uuid4().hex[:8]
    tag = f"celery_durable_bench_{run_id}"
    prefix = f"bench_{run_id}_"
    namespace = f"bench-{run_id}"
    queue = f"celery_durable.bench.{run_id}"
    database_url = (
        make_url(args.database_url)
        .update_query_dict({"application_name": tag})
        .render_as_string(hide_password=False)
    )
    env = {
        "BENCH_BROKER_URL": args.redis_url,
        "BENCH_REDIS_URL": args.redis_url,
        "BENCH_RESULT_BACKEND": args.result_backend,
        "BENCH_QUEUE": queue,
        "CELERY_DURABLE_DATABASE_URL": database_url,
        "CELERY_DURABLE_TABLE_PREFIX": prefix,
        "CELERY_DURABLE_NAMESPACE": namespace,
        "CELERY_DURABLE_SIGNAL_QUEUE": f"{queue}.signals",
    }
    os.environ.update(env)
    # Imported after the environment is set: the app reads it at import.
    from benchmarks import app as bench
    from benchmarks import (
        fanout,
        limits,
        liveness,
        longlived,
        measure,
        operations,
        scale_report,
        throughput,
        windows,
    )
    from benchmarks import scale as scaling
    from benchmarks.db import Monitor
    from benchmarks.report import (
        METHODS,
        build_figures,
        build_targets,
        machine_info,
        render,
        write_json,
    )

    log_dir = args.log_dir / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    rds = redis.Redis.from_url(args.redis_url, decode_responses=True)
    progress(f"run {run_id}: namespace {namespace}, tables {prefix}*, queue {queue}")
    monitor = Monitor(database_url, prefix, namespace)
    b = measure.Bench(run_id=run_id, tag=tag, monitor=monitor, rds=rds)
    machine = machine_info(monitor.server_info(), str(rds.info("server")["redis_version"]))
    workers: list[WorkerProcess] = []
    r: dict[str, Any] = {}

    def start_worker(role: str) -> WorkerProcess:
        worker = WorkerProcess(f"bench-{run_id}-{role}", env, log_dir)
        workers.append(worker)
        b.worker_groups.add(worker.proc.pid)
        worker.wait_ready()
        progress(f"worker {worker.name} ready (pid {worker.proc.pid})")
        return worker

    def step(name: str, fn: Callable[[], T], show: Callable[[T], str]) -> T:
        value = fn()
        progress(f"{name}: {show(value)}")
        return value

    def lat(x: dict[str, Any]) -> str:
        return f"p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms"

    if args.liveness_only:
        liveness.run_all(progress, 3 if args.quick else None)
        return 0
    if args.operations_only:
        return operations.run_only(args, scale, b, machine, queue, progress, wall_start)
    if args.scale_only:
        return scale_report.run_only(args, b, machine, env, log_dir, progress, wall_start)

    def teardown() -> None:
        for worker in workers:
            worker.stop()
        cleanup(b, queue, bench.app)
        bench.durable.store.dispose()
        monitor.close()

    if args.throughput_only:
        try:
            bench.durable.migrate()
            durable = start_worker("durable")
            with profiled(durable, args.py_spy):
                throughput.run_only(b, method, progress)
        finally:
            teardown()
        return 0
    if args.limits_only:
        return limits.run_only(
            args,
            b,
            method,
            limits.scale_for(args.quick, scale.commit_workflows),
            scale.idle_seconds,
            start_worker,
            teardown,
            machine,
            progress,
            wall_start,
        )
    if args.fanout_only:
        try:
            bench.durable.migrate()
            idle = windows.idle_window(b, scale.idle_seconds)
            fanout.run(
                b,
                start_worker,
                progress,
                scale.fanout_batch,
                scale.fanout_latency_samples,
                scale.fanout_commit_maps,
                idle.others / idle.seconds,
            )
        finally:
            teardown()
        return 0
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
        # -- recovery: a SIGKILL to the resumed step, both brokers (workers of their own) --
        if not args.quick:  # minutes of kills; tests/integration/test_benchmarks.py runs one
            r["liveness"] = liveness.run_all(progress)
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
        bench.durable.store.dispose()
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
        + limits.limits_targets(r),
        "methods": {**METHODS, **longlived.METHODS, **limits.METHODS},
        "raw": r,
        "worker_logs": str(log_dir),
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    scale_report.add_to(doc, r["scale"], args.json.parent / "scale.png")
    write_json(doc, args.json)
    print(render(doc))
    return 0
