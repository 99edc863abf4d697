"""``python -m benchmarks.chaos``: workflows under worker kills, broker and Postgres outages.

For each broker (``--broker redis|rabbitmq|both``) it starts two ``celery worker -P prefork
-c 2`` of ``benchmarks.chaos.app`` behind two TCP proxies of its own (Postgres, broker),
starts workflows of five work steps (some wait for a signal the driver sends, some sleep
durably) and, meanwhile, injects faults: SIGKILLs of a whole worker (restarted a second
later), a broker restart (every connection cut and refused; on Redis, which runs without
persistence here, this run's queued and unacked messages dropped too), a Postgres stop and
a crash-like cut (connections reset, a reply in flight dropped) through the proxy, and a
worker paused with SIGSTOP for longer than its lease, then resumed.

It counts, against a ledger kept outside the store (Redis, reached directly):

- lost: runs not finished by the deadline, signals sent but never consumed;
- stuck: runs still unfinished ``stuck_after`` seconds after the last fault ended;
- wrong: a final result other than the driver's expected value, or a failed run;
- rerun_after_commit: a step execution that started after its record had committed;
- worker_self_exits: worker processes (main or pool child) that died on their own;

and prints one line per broker; the exit status is 1 if any of these is not zero.

Example::

    python -m benchmarks.chaos --quick --broker redis
    python -m benchmarks.chaos --broker both --json /tmp/chaos.json      # the full run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent
BROKERS = ("redis", "rabbitmq")
FAILURES = ("lost", "stuck", "wrong", "rerun_after_commit", "worker_self_exits")
SUMMARY = (
    "workflows",
    "steps",
    "faults",
    "lost",
    "stuck",
    "wrong",
    "rerun_after_commit",
    "worker_self_exits",
    "signals_resent",
)
DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.chaos",
        description="celery_durable under worker kills, broker and Postgres outages, pauses",
    )
    parser.add_argument("--broker", choices=(*BROKERS, "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="the CI form: 48 workflows, 6 faults")
    parser.add_argument("--workflows", type=int, help="workflows per broker (300; quick 48)")
    parser.add_argument("--seed", type=int, default=20261201, help="starts, signals, faults")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="Redis broker")
    parser.add_argument("--amqp-url", default=DEFAULT_AMQP_URL, help="RabbitMQ broker")
    parser.add_argument(
        "--pause-at-commit",
        action="store_true",
        help="pause faults stop one pool process right after a step's record committed "
        "(the worst moment for a paused worker) instead of a whole worker at a random moment",
    )
    parser.add_argument("--ledger-url", help="Redis for the ledger (default: --redis-url)")
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=BENCHMARKS / "results" / "chaos",
        help="worker logs go to DIR/<broker>-<run id>/",
    )
    return parser.parse_args(argv)


def summary_line(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"chaos: broker={report['broker']} error={report['error']!r}"
    fields = " ".join(f"{name}={report[name]}" for name in SUMMARY)
    return f"chaos: broker={report['broker']} {fields}"


def failed(report: dict[str, Any]) -> bool:
    return "error" in report or any(report.get(name, 1) != 0 for name in FAILURES)


def run_broker(args: argparse.Namespace) -> dict[str, Any]:
    """One broker, in this process."""
    from benchmarks.chaos.run import ChaosRun, Settings

    settings = Settings(
        quick=args.quick,
        workflows=args.workflows,
        seed=args.seed,
        database_url=args.database_url,
        redis_url=args.redis_url,
        amqp_url=args.amqp_url,
        ledger_url=args.ledger_url or args.redis_url,
        log_dir=args.log_dir,
        pause_at_commit=args.pause_at_commit,
    )
    run = ChaosRun(settings, args.broker)
    try:
        return run.run()
    except Exception as exc:  # noqa: BLE001 - reported as a failed run, with the cause
        import traceback

        traceback.print_exc()
        return {"broker": args.broker, "run_id": run.run_id, "error": repr(exc)[:500]}


def child_arguments(args: argparse.Namespace, broker: str, out: Path) -> list[str]:
    """The command line of one broker's run under ``--broker both``."""
    argv = ["--broker", broker, "--json", str(out), "--seed", str(args.seed)]
    argv += ["--database-url", args.database_url, "--redis-url", args.redis_url]
    argv += ["--amqp-url", args.amqp_url, "--log-dir", str(args.log_dir)]
    if args.ledger_url:
        argv += ["--ledger-url", args.ledger_url]
    if args.workflows is not None:
        argv += ["--workflows", str(args.workflows)]
    if args.quick:
        argv.append("--quick")
    if args.pause_at_commit:
        argv.append("--pause-at-commit")
    return argv


def run_each_broker(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--broker both``: each broker in a child process of its own, one after the other
    (the app module reads its settings from the environment at import)."""
    reports = []
    limit = 300 if args.quick else 900
    for broker in BROKERS:
        with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
            out = Path(tmp) / "report.json"
            command = [
                sys.executable,
                "-m",
                "benchmarks.chaos",
                *child_arguments(args, broker, out),
            ]
            try:
                # The child's summary line is printed here, with the other broker's.
                subprocess.run(
                    command, cwd=ROOT, timeout=limit, check=False, stdout=subprocess.DEVNULL
                )
            except subprocess.TimeoutExpired:
                reports.append({"broker": broker, "error": f"timed out after {limit} s"})
                continue
            if out.exists():
                reports.append(json.loads(out.read_text()))
            else:
                reports.append({"broker": broker, "error": "no report (the run crashed)"})
    return reports


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    began = time.time()
    if args.broker == "both":
        reports = run_each_broker(args)
    else:
        reports = [run_broker(args)]
    for report in reports:
        print(summary_line(report), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = reports[0] if len(reports) == 1 else {"brokers": reports}
        doc = {**doc, "started_at": began, "argv": argv, "pid": os.getpid()}
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 1 if any(failed(r) for r in reports) else 0
