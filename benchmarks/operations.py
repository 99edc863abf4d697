"""The operations commands at scale: ``list`` and ``stats`` with the fill in the tables,
and the dashboard's pages (``benchmarks/dashboard.py``) on the same fill.

Each query is timed through the library's API (what ``celery -A app durable list|stats``
spends answering, without the command's ~1 s of Python start-up), after a warm-up, and
its plan is read with EXPLAIN to check which indexes answer it.

``python -m benchmarks --operations-only`` runs just this part (``run_only``): the fill,
then the measurements, without workers.

Example::

    result = measure_operations(bench.durable, reps=30, workflow="benchmarks.three_steps")
    result["list_failed"]["p99_ms"], result["plans"]["stats"]["indexes"]
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from benchmarks import dashboard
from benchmarks.measure import summary_ms
from celery_durable import Durable
from celery_durable.store import RunFilter

# Every figure must stay under this, with the fill in the tables (the target).
TARGET_MS = 200.0


def _timed(call: Callable[[], Any], reps: int) -> dict[str, Any]:
    for _ in range(2):  # warm-up: connections, compiled statements, buffer cache
        call()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return summary_ms(samples)


def _plan(durable: Durable, what: str, run_filter: RunFilter | None) -> dict[str, Any]:
    text = durable.runtime.store.explain(what, run_filter)
    prefix = re.escape(durable.runtime.store.table_prefix)
    return {
        "indexes": sorted(set(re.findall(rf"\bix_{prefix}runs_\w+", text))),
        "seq_scan": "Seq Scan" in text,
        "text": text,
    }


def measure_operations(durable: Durable, reps: int, workflow: str) -> dict[str, Any]:
    """Time list (failed runs of ``workflow``, 50 a page; its second page; every run) and
    stats, ``reps`` times each; read their plans."""
    first = durable.list_runs(status="failed", workflow=workflow, limit=50)
    if len(first.runs) != 50 or first.cursor is None:
        raise RuntimeError(f"the fill has {len(first.runs)} failed runs of {workflow}, not 50+")
    cursor = first.cursor
    cases: dict[str, Callable[[], Any]] = {
        "list_failed": lambda: durable.list_runs(status="failed", workflow=workflow, limit=50),
        "list_failed_page_2": lambda: durable.list_runs(
            status="failed", workflow=workflow, limit=50, after=cursor
        ),
        "list_all": lambda: durable.list_runs(limit=50),
        "stats": durable.stats,
    }
    result: dict[str, Any] = {name: _timed(call, reps) for name, call in cases.items()}
    counts = durable.stats().counts
    result["runs_counted"] = sum(c.runs for c in counts)
    # The dashboard's pages read through the same API: its runs page is list + stats.
    result["dashboard"] = dashboard.measure_dashboard(durable, reps)
    result["plans"] = {
        "list_failed": _plan(durable, "list", RunFilter(("FAILED",), workflow)),
        "list_all": _plan(durable, "list", RunFilter()),
        "stats": _plan(durable, "stats", None),
    }
    return result


def describe(result: dict[str, Any]) -> str:
    """One progress line."""
    plans = result["plans"]
    listing, stats = result["list_failed"], result["stats"]
    return (
        f"list failed p50 {listing['p50_ms']:.1f} ms (p99 {listing['p99_ms']:.1f}, "
        f"via {', '.join(plans['list_failed']['indexes'])}), stats p50 "
        f"{stats['p50_ms']:.1f} ms (p99 {stats['p99_ms']:.1f}, "
        f"via {', '.join(plans['stats']['indexes'])}); {result['runs_counted']:,} runs counted; "
        + dashboard.describe(result["dashboard"])
    )


def operations_figures(r: dict[str, Any]) -> list[Any]:
    """list and stats with the fill in the tables (p50; the note has the p99 and plans)."""
    from benchmarks.render import Figure

    if "operations" not in r:
        return []
    ops, fill = r["operations"], r["fill"]["runs"]
    plans = ops["plans"]

    def via(name: str) -> str:
        seq = "; a Seq Scan!" if plans[name]["seq_scan"] else ""
        return f"via {', '.join(plans[name]['indexes']) or 'no index'}{seq}"

    listing, board = ops["list_failed"], ops["dashboard"]
    return [
        Figure(
            "operations_list_ms",
            f"list --status failed --workflow X --limit 50, {fill:,} runs, p50",
            listing["p50_ms"],
            "ms",
            note=(
                f"p99 {listing['p99_ms']:.1f}; page 2 p50 "
                f"{ops['list_failed_page_2']['p50_ms']:.1f}; unfiltered p50 "
                f"{ops['list_all']['p50_ms']:.1f}; {via('list_failed')}"
            ),
        ),
        Figure(
            "operations_stats_ms",
            f"stats, {fill:,} runs, p50",
            ops["stats"]["p50_ms"],
            "ms",
            note=f"p99 {ops['stats']['p99_ms']:.1f}; {via('stats')}",
        ),
        Figure(
            "dashboard_runs_page_ms",
            f"dashboard runs page (GET /), {fill:,} runs, p50",
            board["runs_page"]["p50_ms"],
            "ms",
            note=(
                f"p99 {board['runs_page']['p99_ms']:.1f}; failed only p50 "
                f"{board['runs_page_failed']['p50_ms']:.1f}; workflows page p50 "
                f"{board['workflows_page']['p50_ms']:.1f}"
            ),
        ),
        Figure(
            "dashboard_run_page_ms",
            f"dashboard run page, 1,000 steps, {fill:,} runs, p50",
            board["run_page"]["p50_ms"],
            "ms",
            note=(
                f"p99 {board['run_page']['p99_ms']:.1f}; "
                f"{board['run_page']['bytes'] / 1e6:.2f} MB of HTML"
            ),
        ),
    ]


def operations_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    ops = r["operations"]

    def under(figures: dict[str, Any], key: str, label: str, threshold: float) -> dict[str, Any]:
        return {
            "target": f"{label} with {r['fill']['runs']:,} finished runs, p99 (ms)",
            "value": figures[key]["p99_ms"],
            "op": "<",
            "threshold": threshold,
            "pass": figures[key]["p99_ms"] < threshold,
            "note": "",
        }

    return [
        under(ops, "list_failed", "list --status failed --workflow X --limit 50", 200.0),
        under(ops, "stats", "stats", 200.0),
        under(ops["dashboard"], "runs_page", "dashboard runs page", 300.0),
        under(ops["dashboard"], "run_page", "dashboard 1,000-step run page", 300.0),
    ]


def run_only(
    args: Any,
    scale: Any,
    b: Any,
    machine: dict[str, Any],
    queue: str,
    progress: Callable[[str], None],
    wall_start: float,
) -> int:
    """``--operations-only``: migrate, fill, time list and stats, report, clean up."""
    from benchmarks import app as bench
    from benchmarks.housekeeping import cleanup, fill  # the suite's own fill and clean-up
    from benchmarks.methods import METHODS
    from benchmarks.render import write_json

    r: dict[str, Any] = {}
    try:
        bench.durable.migrate()
        r["fill"] = fill(b.monitor, scale, queue)
        progress(f"filled {scale.fill_runs:,} finished runs in {r['fill']['seconds']:.1f}s")
        r["operations"] = measure_operations(bench.durable, scale.ops_reps, bench.three_steps.name)
        progress(describe(r["operations"]))
    finally:
        cleanup(b, queue, bench.app)
        bench.durable.runtime.store.dispose()
        b.monitor.close()
    figures = operations_figures(r)
    doc = {
        "schema": 1,
        "run_id": b.run_id,
        "started_at": wall_start,
        "operations_only": True,
        "scale": asdict(scale),
        "machine": {**machine, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"database_url": args.database_url},
        "figures": {f.name: f.as_dict() for f in figures},
        "targets": operations_targets(r),
        "methods": {"operations": METHODS["operations"], "fill": METHODS["fill"]},
        "raw": r,
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    write_json(doc, args.json)
    for f in figures:
        print(f"{f.label}: {f.value:.1f} {f.unit}  ({f.note})")
    for t in doc["targets"]:
        verdict = "PASS" if t["pass"] else "FAIL"
        print(f"[{verdict}] {t['target']}: {t['value']:.1f} < {t['threshold']:g}")
    return 0
