"""``python -m benchmarks``: set up a private queue/namespace/tables, run, report, clean up."""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import redis
from sqlalchemy.engine import make_url

from benchmarks.housekeeping import cleanup, profiled
from benchmarks.throughput import Method, method_for
from benchmarks.workers import WorkerProcess

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
        "--hot-path-only",
        action="store_true",
        help="the empty-table throughput comparison, then the commits per step and per "
        "workflow (strict and deferred) on the same worker: the hot path's cost in one run; "
        "prints them, writes no report",
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
        "--async-only",
        action="store_true",
        help="only the async figures (async against sync 3-step throughput, a gather of 10 "
        "I/O steps against the same in sequence, SIGKILL of an async run to its step's "
        "start elsewhere, an asyncio producer's loop lag and starts/s against a thread "
        "pool); prints them and writes the JSON",
    )
    parser.add_argument(
        "--talk-only",
        action="store_true",
        help="only the streams and updates figures (a stream value's write to a reader's "
        "receipt, a step's 10,000 stream writes against the same step without them, an "
        "update's round trip on Redis and on RabbitMQ); prints them and writes the JSON",
    )
    parser.add_argument(
        "--agents-only",
        action="store_true",
        help="only the durable agents figures (a durable model request of a Pydantic AI "
        "agent against the same request without a step, on the offline FunctionModel; "
        "model requests repeated after a SIGKILL mid-run); prints them and writes the JSON",
    )
    parser.add_argument(
        "--bigmap-only",
        action="store_true",
        help="only the map of 100,000 items with batch_size='auto' (quick: 2,000): time, "
        "peak RSS of the worker and the driver, messages published; prints them and writes "
        "the JSON",
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
    if args.agents_only:  # the app's agents (benchmarks.agents), there only when asked
        env["BENCH_AGENTS"] = "1"
    os.environ.update(env)
    # Imported after the environment is set: the app reads it at import.
    from benchmarks import (
        agents,
        aio,
        bigmap,
        fanout,
        limits,
        liveness,
        measure,
        operations,
        scale_report,
        talk,
        throughput,
        windows,
    )
    from benchmarks import app as bench
    from benchmarks.db import Monitor
    from benchmarks.report import machine_info

    phases = [name for name, chosen in vars(args).items() if name.endswith("_only") and chosen]
    if args.async_only or not phases:  # before minutes of other figures, not after
        try:
            aio.require_client()
        except aio.AsyncClientMissing as exc:
            print(f"python -m benchmarks: {exc}", file=sys.stderr)
            return 2
    log_dir = args.log_dir / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    rds = redis.Redis.from_url(args.redis_url, decode_responses=True)
    progress(f"run {run_id}: namespace {namespace}, tables {prefix}*, queue {queue}")
    monitor = Monitor(database_url, prefix, namespace)
    b = measure.Bench(run_id=run_id, tag=tag, monitor=monitor, rds=rds)
    machine = machine_info(monitor.server_info(), str(rds.info("server")["redis_version"]))
    workers: list[WorkerProcess] = []

    def start_worker(role: str) -> WorkerProcess:
        worker = WorkerProcess(f"bench-{run_id}-{role}", env, log_dir)
        workers.append(worker)
        b.worker_groups.add(worker.proc.pid)
        worker.wait_ready()
        progress(f"worker {worker.name} ready (pid {worker.proc.pid})")
        return worker

    if args.bigmap_only:
        return bigmap.run_only(args, machine, progress, wall_start)
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
        bench.durable.runtime.store.dispose()
        monitor.close()

    if args.throughput_only or args.hot_path_only:
        try:
            bench.durable.migrate()
            durable = start_worker("durable")
            with profiled(durable, args.py_spy):
                throughput.run_only(b, method, progress)
            if args.hot_path_only:
                measure.hot_path_commits(b, scale.commit_workflows, scale.idle_seconds, progress)
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
    if args.async_only:
        return aio.run_only(args, b, method, start_worker, teardown, machine, progress, wall_start)
    if args.talk_only:
        return talk.run_only(
            args, b, method, start_worker, teardown, machine, progress, wall_start, log_dir
        )
    if args.agents_only:
        return agents.run_only(
            args, b, method, start_worker, teardown, machine, progress, wall_start, log_dir
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
    from benchmarks import full

    return full.run(
        full.Session(
            args,
            scale,
            method,
            env,
            run_id,
            queue,
            log_dir,
            b,
            monitor,
            rds,
            machine,
            wall_start,
            progress,
            start_worker,
            workers,
        )
    )
