"""Async bodies and the async client (issue 44): what an ``async def`` workflow costs against
a sync one, how much a gather of I/O-bound steps saves, how soon a killed async run resumes,
and whether an asyncio producer's event loop stays responsive. How each is measured:
``METHODS``.

``python -m benchmarks --async-only`` runs just this (``run_only``); the full run runs it
too (``run`` on the durable worker, ``recovery`` beside the liveness phase).

Example::

    r = run(b, method, scale_for(quick=False), progress)
    r["throughput_ratio"]["ratio"]          # async / sync, median of the per-round ratios
    r["recovery"] = recovery(scale_for(quick=False), progress)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks import liveness, throughput
from benchmarks.measure import summary_ms
from benchmarks.throughput import Method

if TYPE_CHECKING:
    from benchmarks.measure import Bench

SYNC = "three_steps"
ASYNC = "async_three_steps"
GATHERED_STEPS = 10
IO_SECONDS = 0.2  # each gathered step awaits this much I/O
TICK_S = 0.001  # the lag probe's ticker
IDLE_PROBE_S = 0.5  # the ticker alone on the producer's loop, before its first start
# ThreadPoolExecutor's own default: what a thread-pool producer gets without tuning.
PRODUCER_THREADS = min(32, (os.cpu_count() or 1) + 4)
LIVENESS_WORKFLOW = "async_five_steps"

# The targets.
RATIO_TARGET = 0.90  # async 3-step throughput / sync, same rounds
GATHER_TARGET_S = 0.4  # a gather of 10 steps of 200 ms, first delivery to finish
LAG_P99_TARGET_MS = 5.0  # the producer's loop
STARTS_RATIO_TARGET = 0.80  # async starts/s / the thread pool's

METHODS = {
    "async": (
        "On the durable worker (the suite's command line), after the limiter figures. "
        "Throughput: three_steps and async_three_steps (three no-op async def steps awaited "
        "in sequence in an async def body) in one throughput.compare; the ratio is the "
        "median of the per-round ratios of the two, with its range. Gather: one run at a "
        "time, .get(), of async_gather (10 async steps, each awaiting asyncio.sleep(0.2), "
        "in asyncio.gather) and of async_sequence (the same steps awaited one after "
        "another), alternately, after one warm-up run of each; a figure is the run's "
        "started_at (its first claim, at its first delivery) to its finished_at, both the "
        "database's clock; p50 and max. Recovery: benchmarks.liveness with the workflow "
        "async_five_steps (benchmarks/app.py; five async steps, step 3 awaiting a Redis "
        "flag) in place of the tests' five_steps, its durable cases (worker / pool "
        "process, Redis / RabbitMQ): SIGKILL to step 3's start elsewhere. Producer: "
        "asyncio.run of a coroutine that starts N runs of async_three_steps with "
        "asyncio.gather(wf.adelay() ...), then awaits them all with asyncio.gather("
        "handle.aget(timeout=...) ...), a 1 ms ticker on the same loop from before the "
        "first start to after the last result (lag: actual wake minus the asked one, "
        "loop.time(); p99 of every tick of the rounds); against the same N started from a "
        "ThreadPoolExecutor (its default size) calling .delay(), then .get() on each "
        "handle. Starts/s: N over the driver's time from the first start to the last "
        "start returned. Rounds as the throughput method's, the order reversed every "
        "other round, after a warm-up batch of each; the ratio is the median of the "
        "per-round ratios."
    )
}


@dataclass(frozen=True)
class AsyncScale:
    """Repetitions of each gather run, runs per producer batch, the liveness cases and
    kills per case (``None``: each case's own count)."""

    gather_reps: int
    producer_runs: int
    kills: int | None
    cases: list[tuple[str, bool, bool, int]] = field(default_factory=list)


def scale_for(quick: bool) -> AsyncScale:
    if quick:  # one kill of a worker on Redis: seconds, not minutes
        return AsyncScale(3, 100, 1, [("redis", False, False, 1)])
    return AsyncScale(10, 1000, None, list(liveness.ASYNC_CASES))


class AsyncClientMissing(RuntimeError):
    """The async client the producer figure awaits is not in this tree."""


def require_client() -> None:
    """Refuse to start unless the async client is there: the producer figure needs
    ``await wf.adelay(...)`` and ``await handle.aget(timeout=...)``, and a run that cannot
    measure it should say so before minutes of other figures."""
    from benchmarks import app as bench
    from celery_durable import WorkflowHandle

    missing = [
        name
        for name, owner in (
            ("adelay (a workflow's)", bench.async_three_steps),
            ("aget (WorkflowHandle's)", WorkflowHandle),
        )
        if not callable(getattr(owner, name.split()[0], None))
    ]
    if missing:
        raise AsyncClientMissing(
            f"the async client is not in this tree (missing: {', '.join(missing)}); the "
            "async phase's producer figure awaits wf.adelay(...) and handle.aget(timeout=...) "
            "(issue 44, requirement 5). Run with the client merged, or without the async "
            "phase (another --*-only phase)"
        )


def throughput_ratio(b: Bench, method: Method) -> dict[str, Any]:
    """``three_steps`` and ``async_three_steps`` in one comparison (sync the reference)."""
    result = throughput.compare(
        b, method, [throughput.durable_kind(SYNC), throughput.durable_kind(ASYNC)]
    )
    ratio = throughput.ratio_between(result, ASYNC, SYNC)
    return {**ratio, "throughput": result}


def gather_times(b: Bench, reps: int) -> dict[str, Any]:
    """``reps`` runs each of ``async_gather`` and ``async_sequence``, one at a time,
    alternately (after one warm-up run of each): started_at to finished_at."""
    from benchmarks import app as bench

    flows = {"gathered": bench.async_gather, "sequence": bench.async_sequence}
    seconds: dict[str, list[float]] = {label: [] for label in flows}
    for rep in range(reps + 1):
        order = list(flows) if rep % 2 == 0 else list(reversed(flows))
        for label in order:
            handle = flows[label].delay(GATHERED_STEPS, IO_SECONDS)
            b.result_ids.append(handle.id)
            handle.get(timeout=60)
            run = handle.record()
            if rep == 0:
                continue  # the warm-up: a pool process's first async delivery makes its loop
            if run.started_at is None or run.finished_at is None:
                raise RuntimeError(f"run {run.id}: no started_at or finished_at")
            seconds[label].append(run.finished_at - run.started_at)
    out: dict[str, Any] = {
        "steps": GATHERED_STEPS,
        "io_s": IO_SECONDS,
        "reps": reps,
        "clock": "started_at (the first claim) to finished_at, database clock",
    }
    for label, values in seconds.items():
        out[label] = {
            "p50_s": statistics.median(values),
            "max_s": max(values),
            "min_s": min(values),
            "samples_s": values,
        }
    return out


async def _ticks(lags: list[float], stop: asyncio.Event) -> None:
    """Ask for a wake every ``TICK_S`` until ``stop``; each wake's lateness in ``lags``."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        lags.append(loop.time() - asked)


async def _async_batch(flow: Any, n: int, timeout: float) -> dict[str, Any]:
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticks(lags, stop))
    await asyncio.sleep(IDLE_PROBE_S)
    idle = len(lags)
    start = time.time()
    handles = await asyncio.gather(*(flow.adelay() for _ in range(n)))
    started = time.time()
    await asyncio.gather(*(handle.aget(timeout=timeout) for handle in handles))
    done = time.time()
    stop.set()
    await ticker
    return {
        "ids": [h.id for h in handles],
        "start": start,
        "started": started,
        "done": done,
        "idle_lags": lags[:idle],
        "lags": lags[idle:],
    }


def _thread_batch(flow: Any, n: int, timeout: float) -> dict[str, Any]:
    with ThreadPoolExecutor(PRODUCER_THREADS) as pool:
        start = time.time()
        handles = list(pool.map(lambda _: flow.delay(), range(n)))
        started = time.time()
        list(pool.map(lambda handle: handle.get(timeout=timeout), handles))
        done = time.time()
    return {"ids": [h.id for h in handles], "start": start, "started": started, "done": done}


def _batch(b: Bench, producer: str, n: int) -> dict[str, Any]:
    """One producer batch of ``n`` runs of ``async_three_steps``, every one awaited."""
    from benchmarks import app as bench

    timeout = max(120.0, n / 5.0)
    flow = bench.async_three_steps
    if producer == "asyncio":
        x = asyncio.run(_async_batch(flow, n, timeout))
    else:
        x = _thread_batch(flow, n, timeout)
    ids = x.pop("ids")
    b.result_ids.extend(ids)
    succeeded = b.monitor.count_status(ids, "SUCCEEDED")
    if succeeded != n:
        raise RuntimeError(f"{producer} producer: only {succeeded} of {n} runs succeeded")
    start, started, done = x.pop("start"), x.pop("started"), x.pop("done")
    return {
        "n": n,
        "starts_per_s": n / (started - start),
        "start_s": started - start,
        "all_awaited_s": done - start,
        **x,
    }


def producer(b: Bench, n: int, rounds: int) -> dict[str, Any]:
    """The asyncio producer against the thread pool: a warm-up batch of each, then
    ``rounds`` rounds of one batch of ``n`` each, the order reversed every other round."""
    require_client()
    producers = ("asyncio", "thread_pool")
    for name in producers:
        _batch(b, name, max(10, n // 20))
    batches: dict[str, list[dict[str, Any]]] = {name: [] for name in producers}
    for i in range(rounds):
        for name in producers if i % 2 == 0 else reversed(producers):
            batches[name].append(_batch(b, name, n))
    lags = [lag for x in batches["asyncio"] for lag in x.pop("lags")]
    idle = [lag for x in batches["asyncio"] for lag in x.pop("idle_lags")]
    # Each round's pair of batches seconds apart, as throughput.compare's kinds.
    rates = {name: {"rates": [x["starts_per_s"] for x in runs]} for name, runs in batches.items()}
    return {
        "runs": n,
        "rounds": rounds,
        "threads": PRODUCER_THREADS,
        "lag": {**summary_ms(lags), "ticks": len(lags)},
        "idle_lag": summary_ms(idle),
        "starts_ratio": throughput.ratio_between({"kinds": rates}, "asyncio", "thread_pool"),
        **{
            name: {
                "starts_per_s": statistics.median(x["starts_per_s"] for x in runs),
                "all_awaited_s": statistics.median(x["all_awaited_s"] for x in runs),
                "rounds": runs,
            }
            for name, runs in batches.items()
        },
    }


def run(
    b: Bench, method: Method, scale: AsyncScale, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The figures measured on the running worker (a durable one of the suite's command):
    throughput against the sync workflow, the gather, the producer."""
    r: dict[str, Any] = {"scale": asdict(scale)}
    x = r["throughput_ratio"] = throughput_ratio(b, method)
    progress(f"async throughput: {throughput.describe(x['throughput'])}")
    g = r["gather"] = gather_times(b, scale.gather_reps)
    progress(
        f"{GATHERED_STEPS} async steps of {IO_SECONDS:g} s, first delivery to finish: "
        f"gathered p50 {g['gathered']['p50_s']:.2f} s (max {g['gathered']['max_s']:.2f}), "
        f"in sequence p50 {g['sequence']['p50_s']:.2f} s (max {g['sequence']['max_s']:.2f})"
    )
    p = r["producer"] = producer(b, scale.producer_runs, method.rounds)
    progress(
        f"asyncio producer of {p['runs']} runs: loop lag p99 {p['lag']['p99_ms']:.2f} ms "
        f"(idle loop {p['idle_lag']['p99_ms']:.2f}); {p['asyncio']['starts_per_s']:.0f} "
        f"starts/s against {p['thread_pool']['starts_per_s']:.0f} from {p['threads']} threads"
        f" = {_spread(p['starts_ratio'])}"
    )
    return r


def recovery(scale: AsyncScale, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """The liveness phase's kills with ``async_five_steps`` (workers of their own)."""
    return liveness.run_all(progress, scale.kills, scale.cases, LIVENESS_WORKFLOW)


def _spread(x: dict[str, Any]) -> str:
    return f"{x['ratio']:.2f} ({x['ratio_min']:.2f}-{x['ratio_max']:.2f})"


def async_figures(r: dict[str, Any]) -> list[Any]:
    """The async figures of a run (none if it measured none)."""
    from benchmarks.render import Figure

    if "async" not in r:
        return []
    x = r["async"]
    q, kinds = x["throughput_ratio"], x["throughput_ratio"]["throughput"]["kinds"]
    g, p = x["gather"], x["producer"]
    figures = [
        Figure(
            "async_throughput_ratio",
            "async 3-step throughput / sync 3-step, same rounds",
            q["ratio"],
            "x",
            note=f"{kinds[ASYNC]['rate_per_s']:.1f} vs {kinds[SYNC]['rate_per_s']:.1f} "
            f"workflows/s; over rounds {q['ratio_min']:.2f}-{q['ratio_max']:.2f}",
        )
    ]
    for label, what in (("gathered", "gathered"), ("sequence", "in sequence")):
        s = g[label]
        figures.append(
            Figure(
                f"async_{label}_seconds",
                f"{g['steps']} async steps of {g['io_s']:g} s I/O {what}, p50",
                s["p50_s"],
                "s",
                note=f"max {s['max_s']:.2f} s over {g['reps']} runs; started_at to finished_at",
            )
        )
    figures.append(
        Figure(
            "async_producer_lag_p99",
            f"asyncio producer of {p['runs']:,} runs, event-loop lag p99",
            p["lag"]["p99_ms"],
            "ms",
            note=f"1 ms ticker, {p['lag']['ticks']:,} ticks, max {p['lag']['max_ms']:.1f} ms; "
            f"idle loop p99 {p['idle_lag']['p99_ms']:.2f} ms",
        )
    )
    figures.append(
        Figure(
            "async_producer_starts_ratio",
            f"asyncio producer starts/s / a pool of {p['threads']} threads'",
            p["starts_ratio"]["ratio"],
            "x",
            note=f"{p['asyncio']['starts_per_s']:.0f} vs {p['thread_pool']['starts_per_s']:.0f}"
            f" starts/s; over rounds {p['starts_ratio']['ratio_min']:.2f}-"
            f"{p['starts_ratio']['ratio_max']:.2f}",
        )
    )
    for k in x.get("recovery") or []:
        killed = k["killed"].replace(" ", "_")
        figures.append(
            Figure(
                f"async_recovery_{killed}_{k['broker']}_p50",
                f"SIGKILL of a {k['killed']} ({k['broker']}) to an async run's step, p50",
                k.get("p50_s", float("inf")),
                "s",
                note=f"p99 {k['p99_s']:.2f} s, max {k['max_s']:.2f} s; "
                f"{k['recovered']}/{k['kills']} started again"
                if k["recovered"]
                else f"not started again in {k['kills']} kill(s)",
            )
        )
    return figures


def async_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.render import target

    if "async" not in r:
        return []
    x = r["async"]
    g, p = x["gather"], x["producer"]
    return [
        target(
            "async 3-step throughput / sync 3-step, same rounds",
            x["throughput_ratio"]["ratio"],
            ">=",
            RATIO_TARGET,
        ),
        target(
            f"a gather of {g['steps']} async steps of {g['io_s']:g} s, first delivery to "
            "finish, p50 (s)",
            g["gathered"]["p50_s"],
            "<=",
            GATHER_TARGET_S,
            note=f"max {g['gathered']['max_s']:.2f} s; "
            f"in sequence p50 {g['sequence']['p50_s']:.2f} s",
        ),
        target(
            f"asyncio producer of {p['runs']:,} runs: event-loop lag p99 (ms)",
            p["lag"]["p99_ms"],
            "<=",
            LAG_P99_TARGET_MS,
        ),
        target(
            "asyncio producer starts/s / the thread pool's",
            p["starts_ratio"]["ratio"],
            ">=",
            STARTS_RATIO_TARGET,
        ),
        *liveness.kill_targets(x.get("recovery") or []),
    ]


def run_only(
    args: Any,
    b: Bench,
    method: Method,
    start_worker: Callable[[str], Any],
    teardown: Callable[[], None],
    machine: dict[str, Any],
    progress: Callable[[str], None],
    wall_start: float,
) -> int:
    """``--async-only``: migrate, one durable worker, the figures on it; that worker
    stopped, the kills on workers of their own; prints them and writes the JSON."""
    from benchmarks import app as bench
    from benchmarks.render import report_phase

    scale = scale_for(args.quick)
    r: dict[str, Any] = {}
    try:
        bench.durable.migrate()
        worker = start_worker("durable")
        r["async"] = run(b, method, scale, progress)
        worker.stop()  # the kills' workers get the machine, as in the liveness phase
        r["async"]["recovery"] = recovery(scale, progress)
    finally:
        teardown()
    figures, targets = async_figures(r), async_targets(r)
    report_phase("async", args, b.run_id, method, machine, figures, targets, r, wall_start, METHODS)
    return 0
