"""Fan-out: a durable ``cd.map`` of no-op items against a Celery ``chord`` of no-op tasks
(throughput, latency, commits per item), and what each does when an item's worker is
SIGKILLed; and a chord of durable workflows against a chord of plain tasks, each with a
plain callback, when a header member's worker is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from celery import chord
from celery.result import AsyncResult

from benchmarks import app as bench
from benchmarks import batches, cpu
from benchmarks.measure import (
    Bench,
    _cpu_per_item,
    _epoch,
    _remember,
    summary_ms,
    wait_finished,
)
from benchmarks.windows import commit_window
from benchmarks.workers import WorkerProcess, wait_until

# The kill comparison's workers: a short lease and sweep so that a lost item is noticed
# within the bounded wait (the defaults, 30 s and 1 s, would only make it slower).
KILL_SETTINGS = {
    "CELERY_DURABLE_LOCK_TIMEOUT": "5",
    "CELERY_DURABLE_POLL_INTERVAL": "0.5",
    "CELERY_DURABLE_DISPATCH_GRACE": "5",
}


def _chord(items: int) -> AsyncResult:
    return chord(bench.noop.s() for _ in range(items))(bench.noop.s())


def _remember_chord(b: Bench, result: AsyncResult) -> None:
    _remember(b, result)
    parent = result.parent
    for child in getattr(parent, "results", None) or []:
        b.result_ids.append(child.id)


def chord_throughput(b: Bench, batch: int, items: int) -> dict[str, Any]:
    """``batch`` chords of ``items`` no-op tasks and a no-op callback, started back to back;
    clock: first start to the last callback's ``date_done``."""
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    results = [_chord(items) for _ in range(batch)]
    for result in results:
        result.get(timeout=max(120.0, batch * items / 50.0), interval=0.01)
    seen = time.time()
    usage = _cpu_per_item(b, before, batch * items, seen - start)
    for result in results:
        _remember_chord(b, result)
    elapsed = max(_epoch(r.date_done) for r in results) - start
    return _rate(batch, items, elapsed, seen - start, usage)


def map_throughput(b: Bench, batch: int, items: int) -> dict[str, Any]:
    """``batch`` ``fan_map.delay(items)`` started back to back; clock: first start to the
    last run's ``finished_at``."""
    b.monitor.execute("CHECKPOINT")
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    ids = [bench.fan_map.delay(items).id for _ in range(batch)]
    wait_finished(b, ids, timeout=max(120.0, batch * items / 20.0))
    seen = time.time()
    usage = _cpu_per_item(b, before, batch * items, seen - start)
    succeeded = b.monitor.count_status(ids, "SUCCEEDED")
    if succeeded != batch:
        raise RuntimeError(f"only {succeeded} of {batch} maps succeeded")
    elapsed = b.monitor.last_finished_at(ids) - start
    return _rate(batch, items, elapsed, seen - start, usage)


def _rate(
    batch: int, items: int, elapsed: float, seen: float, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "n": batch,
        "items": items,
        "elapsed_s": elapsed,
        "rate_per_s": batch / elapsed,
        "items_per_s": batch * items / elapsed,
        "driver_saw_last_after_s": seen,
        **usage,
    }


def latency(samples: int, start: Callable[[], Any], b: Bench | None = None) -> dict[str, Any]:
    """One at a time: start, then ``.get()`` (chord: Redis pub/sub; map: LISTEN/NOTIFY)."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        result = start()
        result.get(timeout=60)
        times.append(time.perf_counter() - started)
        if b is not None:
            _remember_chord(b, result)
    return summary_ms(times)


def map_commits(b: Bench, maps: int, idle_rate: float) -> dict[str, Any]:
    """Commits of ``maps`` maps of 100 and of 10 items (committed transaction ids, less
    ``idle_rate`` x window, as ``measure.commits_per_workflow``)."""
    net: dict[int, float] = {}
    windows = []
    for items in (100, 10):

        def workload(items: int = items) -> None:
            ids = [bench.fan_map.delay(items).id for _ in range(maps)]
            wait_finished(b, ids, timeout=120.0, interval=0.2)

        window = commit_window(b, workload)
        windows.append({"items": items, **window.as_dict()})
        net[items] = (window.others - idle_rate * window.seconds) / maps
    per_item = (net[100] - net[10]) / 90.0
    return {
        "maps_per_window": maps,
        "commits_per_map_100": net[100],
        "commits_per_map_10": net[10],
        "commits_per_item": per_item,
        "commits_per_item_all_in": net[100] / 100.0,
        "commits_per_map_fixed": net[10] - 10 * per_item,
        "idle_commits_per_s": idle_rate,
        "windows": windows,
        "clean": all(w["clean"] for w in windows),
    }


def run(
    b: Bench,
    worker: Callable[[str], WorkerProcess],
    progress: Callable[[str], None],
    batch: int,
    latency_samples: int,
    commit_maps: int,
    idle_rate: float,
    items: int = 100,
) -> dict[str, Any]:
    """Chord and map on one fresh worker (the suite's settings): throughput, latency,
    commits per item of the map."""
    r: dict[str, Any] = {}
    fresh = worker("fanout")
    try:
        chord_throughput(b, 2, items)
        map_throughput(b, 2, items)
        r["chord_throughput"] = chord_throughput(b, batch, items)
        progress(f"chord of {items}: {_show_rate(r['chord_throughput'])}")
        r["map_throughput"] = map_throughput(b, batch, items)
        progress(f"map of {items}: {_show_rate(r['map_throughput'])}")
        r["chord_latency"] = latency(latency_samples, lambda: _chord(items), b)
        r["map_latency"] = latency(latency_samples, lambda: bench.fan_map.delay(items))
        progress(
            f"latency p50/p99: chord {_show_lat(r['chord_latency'])}, "
            f"map {_show_lat(r['map_latency'])}"
        )
        r["map_commits"] = map_commits(b, commit_maps, idle_rate)
        c = r["map_commits"]
        progress(
            f"map commits: {c['commits_per_item']:.2f}/item + {c['commits_per_map_fixed']:.2f}"
            f"/map ({c['commits_per_item_all_in']:.2f}/item all in, map of 100)"
        )
        # Issue 26: the batched map against a chord and a chord over chunks, same worker.
        r["batched"] = batches.compare(b, progress, idle_rate)
    finally:
        fresh.stop()
    return r


def _show_rate(x: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in x["cpu_ms_per_item"].items())
    return (
        f"{x['rate_per_s']:.2f}/s ({x['n']} in {x['elapsed_s']:.2f}s, "
        f"{x['items_per_s']:.0f} items/s; CPU ms per item: {cpu})"
    )


def _show_lat(x: dict[str, Any]) -> str:
    return f"{x['p50_ms']:.1f}/{x['p99_ms']:.1f} ms"


# -- SIGKILL of an item's worker ------------------------------------------------------------


def _count(b: Bench, key: str) -> int:
    return int(b.rds.get(key) or 0)


def kill_comparison(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    items: int = 20,
    deadline: float = 30.0,
) -> dict[str, Any]:
    """For a chord and for a map of ``items`` blocking items: start it on a worker, SIGKILL
    the worker's process group while two items run, release the items, start a fresh
    worker and wait up to ``deadline`` s for the callback (chord) or the run (map)."""
    out: dict[str, Any] = {"items": items, "deadline_s": deadline, "settings": KILL_SETTINGS}
    chord_flag = b.key("kill-chord")
    out["chord"] = _killed(
        b,
        env,
        log_dir,
        "chord",
        chord_flag,
        lambda: _start_chord(b, [bench.blocker.s(chord_flag, i) for i in range(items)], chord_flag),
        lambda: bool(b.rds.exists(f"{chord_flag}:callback")),
        deadline,
    )
    map_flag = b.key("kill-map")
    ids: list[str] = []
    out["map"] = _killed(
        b,
        env,
        log_dir,
        "map",
        map_flag,
        lambda: ids.append(bench.block_map.delay(map_flag, items).id),
        lambda: not b.monitor.unfinished(ids),
        deadline,
    )
    out["map"]["succeeded"] = b.monitor.count_status(ids, "SUCCEEDED") == 1
    return out


def chord_kill_comparison(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    items: int = 10,
    deadline: float = 30.0,
    linger: float = 2.0,
) -> dict[str, Any]:
    """A chord of ``items`` durable workflows (``block_flow``: one step that blocks on a
    flag) and the same chord of plain ``blocker`` tasks, each with the plain callback
    ``chord_done``: SIGKILL of the worker's process group while two header members run,
    the flag set, a fresh worker, a wait of up to ``deadline`` s for the callback, then
    ``linger`` s more (a second call would show). For each: completed, how many times the
    callback ran, with which results, how many header members succeeded."""
    out: dict[str, Any] = {
        "items": items,
        "deadline_s": deadline,
        "linger_s": linger,
        "settings": KILL_SETTINGS,
    }
    headers: dict[str, Callable[[str], list[Any]]] = {
        "durable": lambda flag: [bench.block_flow.s(i, flag) for i in range(items)],
        "plain": lambda flag: [bench.blocker.s(flag, i) for i in range(items)],
    }
    for system, header in headers.items():
        out[system] = _kill_chord(b, env, log_dir, system, header, deadline, linger)
    return out


def describe_chord_kill(x: dict[str, Any]) -> str:
    """One progress line: each chord's outcome."""
    return f"chord of workflows: {x['durable']['outcome']}; chord of tasks: {x['plain']['outcome']}"


def _kill_chord(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    system: str,
    header: Callable[[str], list[Any]],
    deadline: float,
    linger: float,
) -> dict[str, Any]:
    flag = b.key(f"kill-chord-{system}")
    members: list[str] = []
    x = _killed(
        b,
        env,
        log_dir,
        f"chord-{system}",
        flag,
        lambda: members.extend(_start_chord(b, header(flag), flag)),
        lambda: bool(b.rds.exists(f"{flag}:callback")),
        deadline,
        linger,
    )
    results = [json.loads(v) for v in b.rds.lrange(f"{flag}:results", 0, -1)]
    expected = list(range(len(members)))
    calls = _count(b, f"{flag}:callbacks")
    every = bool(results) and all(sorted(r) == expected for r in results)
    succeeded = sum(bench.app.backend.get_task_meta(m)["status"] == "SUCCESS" for m in members)
    # The killed members' deliveries: acks_late keeps them in kombu's Redis ``unacked``
    # hash, redelivered only after the visibility timeout (1 h by default).
    unacked = sum(any(m in payload for m in members) for _, payload in b.rds.hscan_iter("unacked"))
    if x["completed"]:
        got = f"with all {len(expected)} results" if every else f"with {results!r}"
        times = {1: "once", 2: "twice"}.get(calls, f"{calls} times")
        x["outcome"] = (
            f"callback ran {times}, {got}, {x['seconds_after_kill']:.1f} s after the kill"
        )
    else:
        x["outcome"] = (
            f"no callback within {deadline:.0f} s of the fresh worker's start; "
            f"{succeeded} of {len(members)} header members succeeded, {unacked} "
            "deliveries left unacknowledged"
        )
    return {
        **x,
        "callback_runs": calls,
        "all_results": every,
        "callback_results": results,
        "header_succeeded": succeeded,
        "unacked_deliveries": unacked,
    }


def _start_chord(b: Bench, header: list[Any], flag: str) -> list[str]:
    """``chord(header)(chord_done.s(flag))``; returns the header members' ids."""
    result = chord(header)(bench.chord_done.s(flag))
    _remember_chord(b, result)
    return [child.id for child in result.parent.results]


def _killed(
    b: Bench,
    env: Mapping[str, str],
    log_dir: Path,
    role: str,
    flag: str,
    start: Callable[[], Any],
    done: Callable[[], bool],
    deadline: float,
    linger: float = 0.0,
) -> dict[str, Any]:
    """``start()`` a fan-out of items that block on ``flag`` on a worker, SIGKILL the
    worker's process group once two items run, set the flag, start a fresh worker and
    wait up to ``deadline`` s for ``done()``, then ``linger`` s more on that worker."""
    first = _worker(b, env, log_dir, f"{role}-killed")
    try:
        start()
        wait_until(lambda: _count(b, f"{flag}:started") >= 2, 30.0, 0.02, "items to run")
        running = _count(b, f"{flag}:started")
        os.killpg(first.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        first.stop()
    b.rds.set(flag, "1", ex=3600)
    second = _worker(b, env, log_dir, f"{role}-fresh")
    ready_at = time.monotonic()
    try:
        finished = _wait(done, deadline, f"the {role} to complete")
        now = time.monotonic()
        if finished:
            time.sleep(linger)
    finally:
        second.stop()
    return {
        "items_running_at_kill": running,
        "items_started": _count(b, f"{flag}:started"),
        "items_finished": _count(b, f"{flag}:done"),
        "completed": finished,
        "seconds_after_kill": now - killed_at if finished else None,
        "seconds_after_fresh_worker": now - ready_at if finished else None,
        "outcome": (
            f"completed {now - killed_at:.1f} s after the kill"
            if finished
            else f"not completed {deadline:.0f} s after the fresh worker started"
        ),
    }


def _worker(b: Bench, env: Mapping[str, str], log_dir: Path, role: str) -> WorkerProcess:
    worker = WorkerProcess(f"bench-{b.run_id}-{role}", {**env, **KILL_SETTINGS}, log_dir)
    b.worker_groups.add(worker.proc.pid)
    return worker.wait_ready()


def _wait(done: Callable[[], bool], deadline: float, what: str) -> bool:
    try:
        wait_until(done, deadline, 0.1, what)
        return True
    except TimeoutError:
        return False


def drop_unacked(b: Bench, queue: str) -> int:
    """Delete the killed workers' unacknowledged messages of this run's queue from kombu's
    Redis ``unacked`` hash (they would come back after the visibility timeout)."""
    dropped = 0
    for tag, payload in b.rds.hscan_iter("unacked"):
        if queue in payload:
            b.rds.hdel("unacked", tag)
            b.rds.zrem("unacked_index", tag)
            dropped += 1
    return dropped
