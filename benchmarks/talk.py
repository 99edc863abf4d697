"""Streams and updates (issue 45): how soon a reader in another process sees a value a
step writes, what 10,000 stream writes add to a step, and how long an update takes from
the caller to its answer on each broker. How each is measured: ``METHODS``.

``python -m benchmarks --talk-only`` runs them (``run_only``): the stream figures and the
Redis update figure on the suite's durable worker, then, that worker stopped, the RabbitMQ
update figure in a process of its own (``python -m benchmarks.talk``: the app reads its
broker at import, as ``benchmarks.liveness``'s cases do) on a worker of the same command
line on RabbitMQ.

Example::

    r = run(b, scale_for(quick=False), progress)
    r["stream"]["p50_ms"]                       # write -> a reader's receipt
    r["writes"]["ratio"]                        # with 10,000 writes / without
    r["updates"]["rabbitmq"] = updates_elsewhere(b, "rabbitmq", 50, log_dir, progress)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.measure import summary_ms
from benchmarks.workers import WorkerProcess, wait_until
from celery_durable import WorkflowFailed
from tests.support.services import AMQP_URL, delete_queues

if TYPE_CHECKING:
    from benchmarks.measure import Bench
    from benchmarks.throughput import Method

PACE_S = 0.005  # one stream value every 5 ms, as a model's tokens
WRITES = 10_000  # values of the writes figure, 100 characters each
READ_TIMEOUT_S = 30.0  # the reader's wait for each next value
UPDATE_TIMEOUT_S = 30.0  # a caller's wait for its answer
WARMUP_UPDATES = 2  # answered on a run of their own before the timed run, each broker
# The brokers of the update figure: Redis on the suite's worker, the others each on a
# worker of its own in a process of its own.
BROKERS = {"redis": None, "rabbitmq": AMQP_URL}

# The targets.
STREAM_P50_TARGET_MS = 20.0
STREAM_P99_TARGET_MS = 100.0
WRITES_RATIO_TARGET = 2.0  # a run of one step writing 10,000 values / the step without them
UPDATE_P50_TARGET_MS = 100.0  # each broker

METHODS = {
    "talk": (
        "--talk-only: on one durable worker (the suite's command line, Redis broker). "
        "Stream latency: stream_ticks, one step writing N values to the stream 'ticks' "
        "with cd.write_stream, one every 5 ms (time.sleep(0.005) between writes), each "
        "{'t': time.time() at the write, 'n': i}; the driver (another process) reads "
        "handle.read_stream('ticks', timeout=30) from offset 0 right after .delay() "
        "returns, and takes time.time() at each value's receipt minus its t (one machine, "
        "one clock); every value must arrive, in order; R runs one after another, the "
        "samples pooled: p50, p99, max. 10,000 writes: one run at a time, .get(), of "
        "stream_writes (one step building 10,000 values of 100 characters, f'{i:0100d}', "
        "and writing each with cd.write_stream), stream_builds (the same step building the "
        "same values and writing none; it returns their count) and stream_returns (the "
        "same step returning the values as its result, stored in its step record; the run "
        "returns their count), in turn, the order reversed every other repetition, after a "
        "warm-up run of each; a run's time is its started_at (its first claim) to its "
        "finished_at, both the database's clock; a figure is the median of the "
        "repetitions; the ratio with writes / without is the ratio of the two medians (the "
        "per-repetition ratios beside it), with writes / returning for context. Update "
        "round trip: ping_pong(K), a body that loops req = cd.wait_for_update('ping', "
        "timeout=60); req.reply(req.payload) (the run suspended in each wait, no worker "
        "held: each answer is a wake-up's delivery and a replay); after a warm-up run "
        "answering 2, the driver starts it and, K times, waits (polling handle.status() "
        "every 5 ms, untimed) until it is WAITING, then times handle.update('ping', i, "
        "timeout=30) with perf_counter, caller to answer (LISTEN/NOTIFY), checking the "
        "answer is i: p50, p99, max. Redis on the suite's worker; RabbitMQ (amqp) once "
        "that worker stopped, from a process of its own (the app reads its broker at "
        "import) on a worker of the same command line with the broker amqp (same tables, a "
        "queue and a durable namespace of its own). A run that took a second attempt or a "
        "recovery is kept and flagged RETRIED in the notes (its time then holds a retry)."
    )
}


@dataclass(frozen=True)
class TalkScale:
    """Values per stream run and runs, repetitions of each writes run, updates timed."""

    stream_values: int
    stream_runs: int
    writes_reps: int
    updates: int


def scale_for(quick: bool) -> TalkScale:
    if quick:
        return TalkScale(100, 1, 2, 10)
    return TalkScale(500, 3, 5, 50)


def retried(run: Any) -> bool:
    """Whether the run (its record) took more than one attempt or a recovery: its time
    then holds a retry's backoff or a lease, not the figure's path (the worker's log says
    why)."""
    return bool(run.attempt > 1 or run.recoveries)


def flagged(x: dict[str, Any]) -> str:
    """A figure's note on runs that retried or failed, if any."""
    note = ""
    if x["retried"]:
        note += f"; {len(x['retried'])} run(s) RETRIED"
    if x.get("failed"):
        errors = sorted({f["error"] for f in x["failed"]})
        note += f"; {len(x['failed'])} run(s) FAILED, not counted ({'; '.join(errors)})"
    return note + " (see the worker log)" if note else ""


def failure(handle: Any, exc: WorkflowFailed) -> dict[str, str]:
    """A failed run, as the JSON keeps it (its figure goes on without it)."""
    return {"id": handle.id, "error": f"{exc.error_type}: {exc.error_message}"}


def summary_or_none(samples_s: list[float]) -> dict[str, Any]:
    """``summary_ms``, or infinite figures (each target fails) when every run failed."""
    if samples_s:
        return summary_ms(samples_s)
    return {"n": 0, **{f"{q}_ms": math.inf for q in ("p50", "p99", "mean", "min", "max")}}


def stream_latency(b: Bench, values: int, runs: int) -> dict[str, Any]:
    """``runs`` runs of ``stream_ticks(values, PACE_S)``, one at a time, each read from
    offset 0 as it writes: each value's receipt minus its write, pooled."""
    from benchmarks import app as bench

    lags: list[float] = []
    per_run: list[dict[str, Any]] = []
    again: list[str] = []
    failed: list[dict[str, str]] = []
    for _ in range(runs):
        handle = bench.stream_ticks.delay(values, PACE_S)
        b.result_ids.append(handle.id)
        seen: list[int] = []
        run_lags: list[float] = []
        for value in handle.read_stream(bench.TICKS, timeout=READ_TIMEOUT_S):
            run_lags.append(time.time() - value["t"])
            seen.append(value["n"])
        try:
            handle.get(timeout=60)
        except WorkflowFailed as exc:
            failed.append(failure(handle, exc))
            continue
        if retried(handle.record()):
            again.append(handle.id)
        if seen != list(range(values)):
            raise RuntimeError(
                f"run {handle.id}: read {len(seen)} values of {values}, or out of order"
            )
        lags.extend(run_lags)
        per_run.append(summary_ms(run_lags))
    return {
        "values": values,
        "pace_s": PACE_S,
        "runs": runs,
        **summary_or_none(lags),
        "per_run": per_run,
        "retried": again,
        "failed": failed,
        "clock": "time.time() at the reader's receipt minus time.time() at the write",
    }


def alternate_runs(
    b: Bench, flows: Mapping[str, Any], args: tuple[Any, ...], reps: int, timeout: float
) -> tuple[dict[str, list[float | None]], list[str], list[dict[str, str]]]:
    """``reps`` runs of each workflow of ``flows`` with ``args``, one at a time, in turn,
    the order reversed every other repetition, after a warm-up run of each: each run's
    started_at to finished_at (database clock), by label, None for a run that failed; the
    timed runs that ``retried``; those that failed."""
    labels = list(flows)
    seconds: dict[str, list[float | None]] = {label: [] for label in labels}
    again: list[str] = []
    failed: list[dict[str, str]] = []
    for rep in range(reps + 1):
        order = labels if rep % 2 == 0 else labels[::-1]
        for label in order:
            handle = flows[label].delay(*args)
            b.result_ids.append(handle.id)
            try:
                handle.get(timeout=timeout)
            except WorkflowFailed as exc:
                failed.append({"label": label, **failure(handle, exc)})
                if rep:
                    seconds[label].append(None)
                continue
            run = handle.record()
            if rep == 0:
                continue  # the warm-up
            if run.started_at is None or run.finished_at is None:
                raise RuntimeError(f"run {run.id}: no started_at or finished_at")
            seconds[label].append(run.finished_at - run.started_at)
            if retried(run):
                again.append(run.id)
    return seconds, again, failed


def writes_times(b: Bench, reps: int) -> dict[str, Any]:
    """A step writing ``WRITES`` values of 100 characters, against the same step without
    the writes (and the same step returning them)."""
    from benchmarks import app as bench

    flows = {
        "with_writes": bench.stream_writes,
        "without": bench.stream_builds,
        "returning": bench.stream_returns,
    }
    seconds, again, failed = alternate_runs(b, flows, (WRITES,), reps, timeout=300.0)
    times = {label: [t for t in values if t is not None] for label, values in seconds.items()}
    # A kind every run of which failed has no time: its ratios are infinite (targets fail).
    medians = {
        label: statistics.median(values) if values else math.inf for label, values in times.items()
    }
    with_writes, without, returning = (medians[k] for k in ("with_writes", "without", "returning"))
    # Per repetition, those in which both runs succeeded.
    per_rep = [
        w / o
        for w, o in zip(seconds["with_writes"], seconds["without"], strict=True)
        if w is not None and o is not None
    ]
    return {
        "writes": WRITES,
        "value_chars": len(bench.hundred_chars(0)),
        "reps": reps,
        "clock": "started_at (the first claim) to finished_at, database clock",
        **{
            label: {
                "p50_s": medians[label],
                "min_s": min(times[label], default=math.inf),
                "max_s": max(times[label], default=math.inf),
                "samples_s": values,
            }
            for label, values in seconds.items()
        },
        "ratio": _ratio(with_writes, without),
        "us_per_write": (with_writes - without) / WRITES * 1e6 if without < math.inf else math.inf,
        "ratio_per_rep": per_rep,
        "ratio_vs_returning": _ratio(with_writes, returning),
        "retried": again,
        "failed": failed,
    }


def _ratio(value: float, reference: float) -> float:
    """``value / reference``; infinite (a target fails) when either has no time."""
    return math.inf if math.inf in (value, reference) else value / reference


def update_round_trips(k: int) -> dict[str, Any]:
    """A warm-up run answering ``WARMUP_UPDATES``, then ``ping_pong(k)``: ``k`` updates,
    each sent once the run waits for it, timed caller to answer. Runs on this process's
    broker (the app's)."""
    from benchmarks import app as bench
    from celery_durable import WorkflowStatus

    ids: list[str] = []
    again: list[str] = []
    times: list[float] = []
    for n, timed in ((WARMUP_UPDATES, False), (k, True)):
        handle = bench.ping_pong.delay(n)
        ids.append(handle.id)
        for i in range(n):
            wait_until(
                lambda h=handle: h.status() == WorkflowStatus.WAITING,  # type: ignore[misc]
                30.0,
                0.005,
                "the run to wait for an update",
            )
            started = time.perf_counter()
            answer = handle.update(bench.UPDATE, i, timeout=UPDATE_TIMEOUT_S)
            elapsed = time.perf_counter() - started
            if answer != i:
                raise RuntimeError(f"run {handle.id}: update {i} answered {answer!r}")
            if timed:
                times.append(elapsed)
        answered = handle.get(timeout=60)
        if answered != n:
            raise RuntimeError(f"run {handle.id}: answered {answered} of {n} updates")
        if timed and retried(handle.record()):
            again.append(handle.id)
    return {
        "updates": k,
        "warmup_updates": WARMUP_UPDATES,
        **summary_ms(times),
        "samples_ms": [t * 1000.0 for t in times],
        "retried": again,
        "ids": ids,
    }


def updates_elsewhere(
    b: Bench, broker: str, k: int, log_dir: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    """``update_round_trips(k)`` on ``broker`` (a name in ``BROKERS``), from a process of
    its own on a worker of its own (same tables; a queue and a namespace of its own); its
    runs' result ids go to ``b``."""
    url = BROKERS[broker]
    if url is None:
        raise ValueError(f"{broker}: the suite's own broker, measured in this process")
    queue = f"{os.environ['BENCH_QUEUE']}.{broker}"
    env = {
        **os.environ,
        "BENCH_BROKER_URL": url,
        "BENCH_QUEUE": queue,
        "CELERY_DURABLE_SIGNAL_QUEUE": f"{queue}.signals",
        # A broker's runs in a namespace of their own, as the library asks.
        "CELERY_DURABLE_NAMESPACE": f"{os.environ['CELERY_DURABLE_NAMESPACE']}-{broker}",
    }
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "benchmarks.talk", "--updates", str(k)]
        command += ["--worker-name", f"bench-{b.run_id}-{broker}", "--log-dir", str(log_dir)]
        command += ["--json", out.name]
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    b.result_ids.extend(result.pop("ids"))
    result["broker"] = broker
    progress(describe_updates(result))
    return result


def describe_updates(x: dict[str, Any]) -> str:
    return (
        f"update round trip ({x['broker']}), {x['updates']} updates: p50 {x['p50_ms']:.1f} ms, "
        f"p99 {x['p99_ms']:.1f} ms, max {x['max_ms']:.1f} ms" + flagged(x)
    )


def run(b: Bench, scale: TalkScale, progress: Callable[[str], None]) -> dict[str, Any]:
    """The figures measured on the running worker (a durable one of the suite's command,
    Redis broker): stream latency, 10,000 writes, the Redis update round trip."""
    r: dict[str, Any] = {"scale": asdict(scale)}
    s = r["stream"] = stream_latency(b, scale.stream_values, scale.stream_runs)
    progress(
        f"stream latency, {s['values']} values every {PACE_S * 1000:g} ms x {s['runs']} runs: "
        f"p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, max {s['max_ms']:.1f} ms" + flagged(s)
    )
    w = r["writes"] = writes_times(b, scale.writes_reps)
    progress(
        f"a step of {w['writes']:,} stream writes: {w['with_writes']['p50_s']:.3f} s, without "
        f"them {w['without']['p50_s']:.3f} s (x{w['ratio']:.2f}), returning them "
        f"{w['returning']['p50_s']:.3f} s (writes x{w['ratio_vs_returning']:.2f}); "
        f"{w['us_per_write']:.1f} us a write" + flagged(w)
    )
    u = update_round_trips(scale.updates)
    b.result_ids.extend(u.pop("ids"))
    u["broker"] = "redis"
    r["updates"] = {"redis": u}
    progress(describe_updates(u))
    return r


def talk_figures(r: dict[str, Any]) -> list[Any]:
    """The streams and updates figures of a run (none if it measured none)."""
    from benchmarks.render import Figure

    if "talk" not in r:
        return []
    x = r["talk"]
    s, w = x["stream"], x["writes"]
    over = f"{s['n']:,} values over {s['runs']} run(s), one every {s['pace_s'] * 1000:g} ms"
    figures = [
        Figure(
            f"talk_stream_{q}",
            f"stream value, write to a reader's receipt (Postgres), {q}",
            s[f"{q}_ms"],
            "ms",
            note=(f"max {s['max_ms']:.1f} ms; {over}" if q == "p99" else over) + flagged(s),
        )
        for q in ("p50", "p99")
    ]
    for label, what in (
        ("with_writes", f"writing {w['writes']:,} stream values"),
        ("without", "building them, no writes"),
        ("returning", "returning them as its result"),
    ):
        v = w[label]
        figures.append(
            Figure(
                f"talk_step_{label}_seconds",
                f"a run of one step {what}, p50",
                v["p50_s"],
                "s",
                note=f"{v['min_s']:.3f}-{v['max_s']:.3f} s over {w['reps']} runs; "
                "started_at to finished_at" + flagged(w),
            )
        )
    figures.append(
        Figure(
            "talk_writes_ratio",
            f"a step's {w['writes']:,} stream writes: with / without",
            w["ratio"],
            "x",
            note=f"ratio of the medians; per run {min(w['ratio_per_rep'], default=math.inf):.2f}-"
            f"{max(w['ratio_per_rep'], default=math.inf):.2f}; {w['us_per_write']:.1f} us a "
            "write; with "
            f"writes / returning the values {w['ratio_vs_returning']:.2f}" + flagged(w),
        )
    )
    for broker, u in x["updates"].items():
        figures.append(
            Figure(
                f"talk_update_{broker}_p50",
                f"update round trip, caller to answer ({broker}), p50",
                u["p50_ms"],
                "ms",
                note=f"p99 {u['p99_ms']:.1f} ms, max {u['max_ms']:.1f} ms over {u['n']} updates"
                + flagged(u),
            )
        )
    return figures


def talk_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.render import target

    if "talk" not in r:
        return []
    x = r["talk"]
    s, w = x["stream"], x["writes"]
    targets = [
        target(
            f"stream value, write to a reader's receipt (Postgres), {q} (ms)",
            s[f"{q}_ms"],
            "<=",
            bound,
            note=f"{s['n']:,} values, one every {s['pace_s'] * 1000:g} ms" + flagged(s),
        )
        for q, bound in (("p50", STREAM_P50_TARGET_MS), ("p99", STREAM_P99_TARGET_MS))
    ]
    targets.append(
        target(
            f"a step of {w['writes']:,} stream writes of {w['value_chars']} characters / the "
            "same step without them",
            w["ratio"],
            "<=",
            WRITES_RATIO_TARGET,
            note=f"{w['with_writes']['p50_s']:.3f} s vs {w['without']['p50_s']:.3f} s; "
            f"returning the values {w['returning']['p50_s']:.3f} s" + flagged(w),
        )
    )
    for broker, u in x["updates"].items():
        targets.append(
            target(
                f"update round trip, caller to answer ({broker}), p50 (ms)",
                u["p50_ms"],
                "<=",
                UPDATE_P50_TARGET_MS,
                note=f"p99 {u['p99_ms']:.1f} ms" + flagged(u),
            )
        )
    return targets


def run_only(
    args: Any,
    b: Bench,
    method: Method,
    start_worker: Callable[[str], Any],
    teardown: Callable[[], None],
    machine: dict[str, Any],
    progress: Callable[[str], None],
    wall_start: float,
    log_dir: Path,
) -> int:
    """``--talk-only``: migrate, one durable worker, the figures on it; that worker
    stopped, the update figure on the other brokers; prints them and writes the JSON."""
    from benchmarks import app as bench
    from benchmarks.render import report_phase

    scale = scale_for(args.quick)
    r: dict[str, Any] = {}
    try:
        bench.durable.migrate()
        worker = start_worker("durable")
        r["talk"] = run(b, scale, progress)
        worker.stop()  # its sweeper must not take the other broker's runs
        for broker, url in BROKERS.items():
            if url is not None:
                x = updates_elsewhere(b, broker, scale.updates, log_dir, progress)
                r["talk"]["updates"][broker] = x
    finally:
        teardown()
    figures, targets = talk_figures(r), talk_targets(r)
    report_phase("talk", args, b.run_id, method, machine, figures, targets, r, wall_start, METHODS)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``updates_elsewhere``'s process: a worker on this environment's broker
    (``BENCH_BROKER_URL``), ``update_round_trips`` on it, the JSON; the worker stopped and
    its queues deleted."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.talk",
        description="update round trips on a worker of BENCH_BROKER_URL (the tables, queue "
        "and namespace of the environment, migrated already); run by --talk-only",
    )
    parser.add_argument("--updates", type=int, required=True)
    parser.add_argument("--worker-name", required=True)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    from benchmarks import app as bench

    worker = WorkerProcess(args.worker_name, {}, args.log_dir)
    try:
        worker.wait_ready()
        result = update_round_trips(args.updates)
    finally:
        worker.stop()
        bench.durable.runtime.store.dispose()
        delete_queues(bench.BROKER_URL, [bench.QUEUE, bench.durable.config.signal_queue])
    args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
