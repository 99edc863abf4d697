"""Figures, ratios to plain Celery, targets, the printed table and the JSON document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The printed report and the JSON document live in ``render`` (importable from here too).
from benchmarks.render import COMMIT_TOLERANCE, machine_info, render, write_json

__all__ = ["COMMIT_TOLERANCE", "machine_info", "render", "write_json"]

METHODS = {
    "throughput": (
        "The suite's one throughput method (benchmarks.throughput.compare), the same in the "
        "headline, the filled tables and every scale row: on one fresh worker, a warm-up "
        "batch of each kind, then rounds of one batch of N per kind (plain tasks, plain "
        "chains, the 3-step workflows), the order reversed every other round. A batch: N "
        "started back to back with .delay(); clock from just before the first .delay() to "
        "the last completion (the latest date_done of the plain results, stored by the "
        "worker; the latest finished_at of the durable runs, database clock, same host). "
        "The driver waits with AsyncResult joins (plain) or by polling the runs table for "
        "the batch's unfinished ids (durable). Each durable batch starts with a CHECKPOINT. "
        "A figure is the median of its rounds; its ratio to the plain task is the median of "
        "the per-round ratios (each against the plain batch of the same round), with their "
        "range as the spread. Durable runs report their final state to the Redis result "
        "backend when they settle (the worker's write after the settle's commit); the same "
        "3-step workflow started with apply_async(ignore_result=True) reports nothing (no "
        "canvas: as on an app without a backend), measured beside it in the same rounds; "
        "with / without is the median of the per-round ratios of the two."
    ),
    "cpu": (
        "CPU seconds from /proc between start and the driver seeing the last result, per "
        "item: driver (this process), worker (benchmark worker process groups), postgres "
        "(all its processes), redis, other (everything else: interference, kernel threads)."
    ),
    "latency": (
        "One at a time after a warm-up: start, then AsyncResult.get() (plain, Redis pub/sub) "
        "or handle.get() (durable, LISTEN/NOTIFY); driver perf_counter."
    ),
    "replay": (
        "Workflow of K no-op steps that raises on attempt 1 (max_attempts=2, retry_backoff=0); "
        "the sweeper republishes it and attempt 2 replays K steps from history. Time from "
        "attempt 2's task_prerun (worker time.time(), just before the claim UPDATE) to the "
        "start of step K+1 (worker time.time() written to Redis). Median of the repetitions."
    ),
    "commits": (
        "Committed transactions that wrote: the transaction ids assigned in a window (xmax of "
        "pg_current_snapshot() at its start and end) whose pg_xact_status is committed, exact "
        "once they finished (pg_stat_database.xact_commit gets a backend's count only when it "
        "flushes its statistics, up to 10 s later on PG15). Every transaction of a workflow's "
        "path writes; read-only ones (the driver's monitoring statements, idle polls) get no "
        "id and are not counted. A window ends 1 s after the workload, once none of its ids "
        "is in progress. Subtracted: the idle rate (sweeper, heartbeat) measured with the "
        "workers idle before and after, times the window length. Includes the driver's "
        "INSERT of each run. Ids are cluster-wide: a window in which another database had a "
        "session start, end or run a statement is not clean (a workflow window is measured "
        "again, up to the attempts; the figure is flagged). per step = (c10 - c3) / 7; "
        "fixed = c3 - 3 x per step."
    ),
    "fill": (
        "INSERT ... SELECT generate_series of finished runs (one in 50 FAILED, the rest "
        "SUCCEEDED; one in 4 of a second workflow; due_at NULL, ids in the library's "
        "time-ordered UUIDv7 layout, created 10 ms apart in the past) with their steps into "
        "the run's own namespace and tables, then VACUUM ANALYZE, then the durable "
        "throughput measurement again on the same worker."
    ),
    "fanout": (
        "A durable workflow doing cd.map(noop_step, range(100)) against a Celery chord of 100 "
        "no-op tasks with a no-op callback (Redis result backend), on one fresh worker of the "
        "same command line. Throughput: a small batch started back to back after a warm-up; "
        "clock from the first start to the last completion (the callbacks' date_done, the "
        "runs' finished_at). Latency: one at a time, .get(). Commits: as for workflows, with "
        "maps of 100 and of 10 items; per item = (c100 - c10) / 90, fixed = c10 - 10 x per item."
    ),
    "kill": (
        "A chord (callback sets a Redis key) and a map of 20 items that block on a Redis flag; "
        "once two items run, SIGKILL of the worker's process group, the flag set, a fresh "
        "worker started, and a bounded wait for the callback or the run. The kill phase's "
        "workers use lock_timeout 5 s, poll_interval 0.5 s, dispatch_grace 5 s."
    ),
    "kill_chord": (
        "chord([block_flow.s(i, flag) for i in range(10)], chord_done.s(flag)), a chord of 10 "
        "durable workflows whose one step blocks on a Redis flag, and the same chord of 10 "
        "plain blocker tasks, each with the plain callback chord_done (it counts its runs "
        "and keeps the results it got, in Redis); once two members run, SIGKILL of the "
        "worker's process group, the flag set, a fresh worker, a bounded wait for the "
        "callback, then 2 s more on that worker. Reported: completed, the callback's runs, "
        "whether each had all 10 results, the time from the kill, the members that "
        "succeeded (result backend). The same workers' settings as the kill phase."
    ),
    "signal": (
        "Start the signal workflow, poll until WAITING, then from just before handle.signal() "
        "(driver time.time()) to the start of the next step (worker time.time() via Redis)."
    ),
    "operations": (
        "With the fill in the tables (one run in 50 FAILED, one in 4 of a second workflow): "
        "durable.list_runs(status='failed', workflow=<three_steps>, limit=50) (what `durable "
        "list --status failed --workflow X --limit 50` runs), its second page (by cursor), "
        "list_runs(limit=50) unfiltered, and durable.stats(), each after 2 warm-up calls, "
        "timed over the scale's repetitions (driver perf_counter, through SQLAlchemy and "
        "psycopg: the command adds only its Python start-up). Their plans are read with "
        "EXPLAIN and the indexes named in them recorded. The dashboard: GET / (the runs "
        "page: list_runs + stats) and GET /run/<id> of a run of 1,000 steps (inserted for "
        "the measurement, ~150-byte inputs and outputs) through its WSGI app in-process "
        "(Flask's test client), 2 warm-ups, then the same repetitions."
    ),
}


@dataclass
class Figure:
    name: str
    label: str
    value: float
    unit: str
    vs_plain_task: float | None = None
    vs_plain_chain: float | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "vs_plain_task": self.vs_plain_task,
            "vs_plain_chain": self.vs_plain_chain,
            "note": self.note,
        }


def vs_plain(x: dict[str, Any]) -> float:
    """A throughput's ratio to the plain task: the median of its rounds' ratios, each to
    the plain batch of the same round (``throughput.compare``)."""
    return float(x["vs_ref"])


def build_figures(r: dict[str, Any]) -> list[Figure]:
    """The figures of a run's raw results ``r``, each with its ratio to plain Celery."""
    task_tps = r["plain_tasks"]["rate_per_s"]
    chain_tps = r["plain_chains"]["rate_per_s"]
    task_lat = r["plain_task_latency"]
    fill = r["fill"]["runs"]
    figures = [
        Figure("plain_task_throughput", "plain task throughput", task_tps, "tasks/s", 1.0),
        Figure(
            "plain_chain_throughput",
            "plain 3-task chain throughput",
            chain_tps,
            "chains/s",
            vs_plain(r["plain_chains"]),
            1.0,
        ),
    ]
    for name, label, key, note in (
        (
            "durable_throughput",
            "durable 3-step throughput",
            "durable_empty",
            "empty tables; reports to the Redis result backend",
        ),
        (
            "durable_throughput_no_backend",
            "durable 3-step throughput, no result backend",
            "durable_no_backend",
            "empty tables; ignore_result=True: no report",
        ),
        (
            "deferred_throughput",
            "durable 3 deferred steps throughput",
            "deferred_empty",
            "empty tables; commit='deferred'",
        ),
        (
            "durable_throughput_filled",
            f"durable 3-step throughput, {fill:,} finished runs",
            "durable_filled",
            f"{vs_plain(r['durable_filled']) / vs_plain(r['durable_empty']):.2f} x empty",
        ),
    ):
        x = r[key]
        tps = x["rate_per_s"]
        figures.append(
            Figure(
                name,
                label,
                tps,
                "workflows/s",
                vs_plain(x),
                tps / chain_tps,
                f"{note}; x plain over rounds {x['vs_ref_min']:.2f}-{x['vs_ref_max']:.2f}"
                if "vs_ref" in x
                else note,
            )
        )
    backend = r["backend_report"]
    figures.append(
        Figure(
            "result_backend_ratio",
            "durable 3-step throughput, with result backend / without",
            backend["ratio"],
            "x",
            note=f"over rounds {backend['ratio_min']:.2f}-{backend['ratio_max']:.2f}; "
            f"target >= {backend['target']:.2f} (within 10%)",
        )
    )
    for name, label, key in (
        ("plain_task_latency", "plain task latency", "plain_task_latency"),
        ("plain_chain_latency", "plain 3-task chain latency", "plain_chain_latency"),
        ("durable_latency", "durable 3-step latency", "durable_latency"),
        ("signal_resume_latency", "signal -> resume latency", "signal_latency"),
    ):
        for q in ("p50", "p99"):
            value = r[key][f"{q}_ms"]
            figures.append(
                Figure(f"{name}_{q}", f"{label} {q}", value, "ms", value / task_lat[f"{q}_ms"])
            )
    replay = r["replay"]
    figures.append(
        Figure(
            "replay_ms",
            f"replay of {replay['k']:,} finished steps",
            replay["median_replay_ms"],
            "ms",
            replay["median_replay_ms"] / task_lat["p50_ms"],
            note=(
                f"claim+history {replay['median_claim_and_load_history_ms']:.1f} ms, "
                f"replay loop {replay['median_replay_loop_ms']:.1f} ms"
            ),
        )
    )
    from benchmarks.operations import operations_figures  # imports the library: on use

    figures.extend(operations_figures(r))
    commits = r["commits"]
    clean = "" if commits["clean"] else "NOT CLEAN: other sessions were active"
    for name, label, unit in (
        ("commits_per_workflow_3_steps", "DB commits per 3-step workflow", "commits"),
        ("commits_per_workflow_10_steps", "DB commits per 10-step workflow", "commits"),
        ("commits_per_step", "DB commits per finished step (marginal)", "commits"),
        ("commits_per_workflow_fixed", "DB commits per workflow beyond steps", "commits"),
    ):
        figures.append(Figure(name, label, commits[name], unit, note=clean or "plain: 0"))
    deferred = r["deferred_commits"]
    figures.append(
        Figure(
            "deferred_commits_beyond_start",
            "DB commits per 3-deferred-step workflow beyond its start",
            deferred["commits_per_workflow_beyond_start"],
            "commits",
            note="" if deferred["clean"] else "NOT CLEAN: other sessions were active",
        )
    )
    figures.extend(fanout_figures(r["fanout"], task_lat))
    from benchmarks.batches import batches_figures
    from benchmarks.bigmap import bigmap_figures

    figures.extend(batches_figures(r["fanout"].get("batched")))
    figures.extend(bigmap_figures(r))
    from benchmarks.longlived import longlived_figures  # imports the library: on use

    figures.extend(longlived_figures(r))
    from benchmarks.limits import limits_figures

    figures.extend(limits_figures(r))
    return figures


def fanout_figures(f: dict[str, Any], task_lat: dict[str, Any]) -> list[Figure]:
    chord, fmap = f["chord_throughput"], f["map_throughput"]
    items = fmap["items"]
    figures = [
        Figure(
            "chord_throughput",
            f"chord of {items} no-op tasks throughput",
            chord["rate_per_s"],
            "chords/s",
            note=f"{chord['items_per_s']:,.0f} items/s, batch of {chord['n']}",
        ),
        Figure(
            "map_throughput",
            f"durable cd.map of {items} no-op items throughput",
            fmap["rate_per_s"],
            "maps/s",
            note=f"{fmap['rate_per_s'] / chord['rate_per_s']:.2f} x chord, "
            f"{fmap['items_per_s']:,.0f} items/s, batch of {fmap['n']}",
        ),
    ]
    for name, label, key in (
        ("chord_latency", f"chord of {items} latency", "chord_latency"),
        ("map_latency", f"cd.map of {items} latency", "map_latency"),
    ):
        for q in ("p50", "p99"):
            value = f[key][f"{q}_ms"]
            figures.append(
                Figure(f"{name}_{q}", f"{label} {q}", value, "ms", value / task_lat[f"{q}_ms"])
            )
    c = f["map_commits"]
    clean = "" if c["clean"] else "NOT CLEAN: other sessions were active; "
    figures.append(
        Figure(
            "map_commits_per_item",
            "DB commits per cd.map item (marginal)",
            c["commits_per_item"],
            "commits",
            note=f"{clean}{c['commits_per_map_fixed']:.2f} per map beyond its items",
        )
    )
    figures.append(
        Figure(
            "map_commits_per_item_all_in",
            "DB commits per item of a cd.map of 100, all in",
            c["commits_per_item_all_in"],
            "commits",
            note=f"{clean}{c['commits_per_map_100']:.1f} per map of 100",
        )
    )
    return figures


def build_targets(figures: dict[str, Figure], commits_clean: bool) -> list[dict[str, Any]]:
    def target(
        name: str, value: float, op: str, threshold: float, slack: float = 0.0, note: str = ""
    ) -> dict[str, Any]:
        ok = {
            ">=": value >= threshold - slack,
            "<=": value <= threshold + slack,
            "<": value < threshold,
        }[op]
        return {
            "target": name,
            "value": value,
            "op": op,
            "threshold": threshold,
            "pass": ok,
            "note": note,
        }

    durable = figures["durable_throughput"]
    unclean = "" if commits_clean else "other sessions were active: not clean"
    return [
        target(
            "durable 3-step throughput / plain task throughput",
            durable.vs_plain_task or 0,
            ">=",
            0.8,
        ),
        target(
            "durable 3-step throughput / plain 3-task chain throughput",
            durable.vs_plain_chain or 0,
            ">=",
            3.0,
        ),
        target(
            "durable 3-step throughput with the Redis result backend / without "
            "(ignore_result=True), same rounds",
            figures["result_backend_ratio"].value,
            ">=",
            0.9,
            note="within 10%",
        ),
        target(
            "durable 3 deferred steps throughput / plain task throughput",
            figures["deferred_throughput"].vs_plain_task or 0,
            ">=",
            0.8,
        ),
        target(
            "DB commits per 3-deferred-step workflow beyond its start",
            figures["deferred_commits_beyond_start"].value,
            "<=",
            2.0,
            COMMIT_TOLERANCE,
        ),
        target(
            "DB commits per finished step",
            figures["commits_per_step"].value,
            "<=",
            1.0,
            COMMIT_TOLERANCE,
            unclean,
        ),
        target(
            "DB commits per workflow beyond its steps",
            figures["commits_per_workflow_fixed"].value,
            "<=",
            3.0,
            COMMIT_TOLERANCE,
            unclean,
        ),
        target("replay of 1,000 finished steps (ms)", figures["replay_ms"].value, "<=", 50.0),
        target(
            "throughput with finished runs / empty (each x its rounds' plain tasks)",
            (figures["durable_throughput_filled"].vs_plain_task or 0)
            / (durable.vs_plain_task or 1),
            ">=",
            0.9,
        ),
        target("signal -> resume p50 (ms)", figures["signal_resume_latency_p50"].value, "<", 100.0),
        target(
            "cd.map of 100 throughput / chord of 100 throughput",
            figures["map_throughput"].value / figures["chord_throughput"].value,
            ">=",
            1.5,
        ),
        target(
            "DB commits per cd.map item",
            figures["map_commits_per_item"].value,
            "<=",
            1.0,
            COMMIT_TOLERANCE,
        ),
    ]
