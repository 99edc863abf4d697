"""How soon a dead worker's run resumes elsewhere: from the SIGKILL to the start of the
interrupted step on another worker, at default settings (30 s lease, 1 s poll), through
the proof of life's takeover (``engine/liveness.py``), not the lease's expiry. The anchor
is a plain Celery task with ``acks_late``, killed the same way.

    python -m benchmarks --liveness-only              # every case below, one run
    python -m benchmarks.liveness --broker rabbitmq --kills 20 --pool-process
    python -m benchmarks.liveness --broker redis --plain --kills 1
    python -m benchmarks.liveness --workflow async_five_steps --kills 5   # an async body

Each kill: a ``five_steps`` run of the tests' app (tests/apps/basic.py) blocks in step 3 on
one of two workers (``-P prefork -c 2``); that worker's process group (or, with
``--pool-process``, only the pool process running it) is SIGKILLed; the figure is the time
until step 3 starts again (its Redis counter, polled every 5 ms). A killed worker is
replaced before the next kill. ``--plain``: the same with ``tests.plain_blocking``; a task
not started again within ``--give-up`` s counts as not recovered. ``--workflow
async_five_steps``: the same five steps in an ``async def`` body (``benchmarks/app.py``,
its workers running that app), blocked in step 3 the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from tests.support.services import AMQP_URL, PG_URL, REDIS_URL, drop_tables, unique
from tests.support.waiting import wait_until
from tests.support.workers import Worker

# The durable cases (broker, kill one pool process) and the plain anchors, with how many
# kills each gets in a default run: a plain task that is never redelivered costs the whole
# give-up time, so those get one.
CASES: list[tuple[str, bool, bool, int]] = [
    ("redis", False, False, 20),
    ("rabbitmq", False, False, 20),
    ("redis", True, False, 20),
    ("rabbitmq", True, False, 20),
    ("redis", False, True, 1),
    ("rabbitmq", False, True, 5),
    ("redis", True, True, 1),
    ("rabbitmq", True, True, 1),
]
# Issue 44: the durable cases again with the run's body an ``async def``.
ASYNC_CASES: list[tuple[str, bool, bool, int]] = [c for c in CASES if not c[2]]

# The workflow a kill interrupts, by name, and the app (module) whose workers run it; each
# blocks in step 3 under the same Redis keys (``started:``, ``block:``, ``effects:<key>:s3``).
WORKFLOWS = {"five_steps": "tests.apps.basic", "async_five_steps": "benchmarks.app"}


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def summarize(figures: list[float | None]) -> dict[str, Any]:
    recovered = sorted(f for f in figures if f is not None)
    out: dict[str, Any] = {"kills": len(figures), "recovered": len(recovered)}
    if recovered:
        out["p50_s"] = statistics.median(recovered)
        out["p99_s"] = (
            statistics.quantiles(recovered, n=100, method="inclusive")[98]
            if len(recovered) > 1
            else recovered[0]
        )
        out["max_s"] = recovered[-1]
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    prefix, queue = unique("lv")[:9] + "_", unique("lvq-")
    for name in ("LOCK_TIMEOUT", "POLL_INTERVAL", "DISPATCH_GRACE"):
        os.environ.pop(f"CELERY_DURABLE_{name}", None)  # the library's defaults
    os.environ.update(
        {
            "CELERY_DURABLE_DATABASE_URL": PG_URL,
            "CELERY_DURABLE_TABLE_PREFIX": prefix,
            "CELERY_DURABLE_NAMESPACE": unique("lvns-"),
            "TEST_BROKER_URL": AMQP_URL if args.broker == "rabbitmq" else REDIS_URL,
            "TEST_REDIS_URL": REDIS_URL,
            "TEST_QUEUE": queue,
            "BENCH_BROKER_URL": AMQP_URL if args.broker == "rabbitmq" else REDIS_URL,
            "BENCH_REDIS_URL": REDIS_URL,
            "BENCH_QUEUE": queue,
        }
    )
    module = WORKFLOWS[args.workflow]
    app = import_module(module)  # reads the settings above
    workflow = getattr(app, args.workflow)
    app.durable.migrate()
    rds = app._redis
    spawn = lambda: Worker(module, {}, queues=queue, name=unique("lv-"))  # noqa: E731
    workers = [spawn() for _ in "ab"]
    figures: list[float | None] = []
    step = "plain" if args.plain else "s3"
    try:
        for worker in workers:
            worker.wait_ready()
        for _ in range(args.kills):
            key = unique("k")
            rds.set(f"block:{key}:{step}", "1")
            if args.plain:
                app.plain_blocking.delay(key)
                pid = int(wait_until(lambda k=key: rds.get(f"pid:{k}"), 60, message="the pid"))
                finish: Callable[[], Any] = lambda: None  # noqa: E731
            else:
                handle = workflow.delay(key)
                wait_until(lambda k=key: rds.get(f"started:{k}:s3"), 60, message="step 3")
                owner = wait_until(lambda h=handle: h.record().owner, 30, message="the owner")
                pid = int(owner.split(":")[1])
                finish = lambda h=handle: h.get(timeout=120)  # noqa: E731
            victim = next(w for w in workers if w.proc.pid == parent_of(pid))
            killed_at = time.monotonic()
            if args.pool_process:
                os.kill(pid, signal.SIGKILL)
            else:
                victim.kill()
            try:
                wait_until(
                    lambda k=key: int(rds.get(f"effects:{k}:{step}") or 0) >= 2,
                    args.give_up,
                    0.005,
                    "started again",
                )
                figures.append(time.monotonic() - killed_at)
                print(f"kill {len(figures)}: started again after {figures[-1]:.2f}s", flush=True)
            except AssertionError:
                figures.append(None)
                print(f"kill {len(figures)}: not started again in {args.give_up:g}s", flush=True)
            rds.delete(f"block:{key}:{step}")
            if figures[-1] is not None:
                finish()
            if not args.pool_process:
                workers.remove(victim)
                workers.append(spawn().wait_ready())
    finally:
        for worker in workers:
            worker.kill()
        app.durable.runtime.store.dispose()
        drop_tables(PG_URL, prefix)
    return {
        "broker": args.broker,
        "killed": "pool process" if args.pool_process else "worker",
        "task": "plain acks_late" if args.plain else "durable",
        "workflow": None if args.plain else args.workflow,
        **summarize(figures),
        "figures_s": figures,
    }


def run_all(
    progress: Callable[[str], None],
    kills: int | None = None,
    cases: Sequence[tuple[str, bool, bool, int]] = CASES,
    workflow: str = "five_steps",
) -> list[dict[str, Any]]:
    """Every case (``cases``: ``CASES``, ``ASYNC_CASES``), the durable ones with
    ``workflow`` (a name in ``WORKFLOWS``), each in a process of its own (the app reads its
    broker at import)."""
    results = []
    for broker, pool_process, plain, default_kills in cases:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            n = default_kills if kills is None or plain else kills
            command = [sys.executable, "-m", "benchmarks.liveness", "--broker", broker]
            command += ["--kills", str(n), "--json", out.name, "--workflow", workflow]
            command += ["--pool-process"] * pool_process + ["--plain"] * plain
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            result = json.loads(Path(out.name).read_text())
        results.append(result)
        progress(describe(result))
    return results


def describe(x: dict[str, Any]) -> str:
    task = x["task"] if x.get("workflow") in (None, "five_steps") else x["workflow"]
    head = f"liveness {task}, {x['broker']}, {x['killed']} killed:"
    if not x["recovered"]:
        return f"{head} not started again within the give-up time in {x['kills']} kill(s)"
    return (
        f"{head} p50 {x['p50_s']:.2f}s p99 {x['p99_s']:.2f}s max {x['max_s']:.2f}s "
        f"({x['recovered']}/{x['kills']} started again)"
    )


# Issue 26: from the SIGKILL to the interrupted step's start elsewhere, seconds.
P50_TARGET, P99_TARGET = 1.0, 2.0


def liveness_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """p50 and p99 of each durable case of the liveness phase."""
    return kill_targets(r.get("liveness") or [])


def kill_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """p50 and p99 of each durable case of ``results`` (``run_all``'s; the plain anchors
    are reported, not bounded)."""
    targets = []
    for x in results:
        if x["task"] != "durable":
            continue
        body = "" if x.get("workflow") in (None, "five_steps") else f" of {x['workflow']}"
        for q, bound in (("p50", P50_TARGET), ("p99", P99_TARGET)):
            value = x.get(f"{q}_s")
            targets.append(
                {
                    "target": f"SIGKILL of a {x['killed']} ({x['broker']}) to the step's "
                    f"start elsewhere{body}, {q} (s)",
                    "value": value if value is not None else float("inf"),
                    "op": "<=",
                    "threshold": bound,
                    "pass": value is not None and value <= bound,
                    "note": f"{x['recovered']}/{x['kills']} kills recovered",
                }
            )
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.liveness")
    parser.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--pool-process", action="store_true", help="kill one pool process")
    parser.add_argument("--plain", action="store_true", help="a plain acks_late Celery task")
    parser.add_argument("--give-up", type=float, default=40.0, help="seconds per kill")
    parser.add_argument(
        "--workflow",
        choices=sorted(WORKFLOWS),
        default="five_steps",
        help="the durable workflow killed in step 3 (async_five_steps: an async def body)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.plain and args.workflow != "five_steps":
        parser.error(f"--plain times a plain task: --workflow {args.workflow} does not apply")
    result = measure(args)
    print(describe(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
