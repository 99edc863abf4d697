"""The scale figures in the report: figures, the target, a markdown table and a PNG."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.render import Figure

# The realistic-work target: the durable workflow takes at most this much longer per item.
IO_OVERHEAD_TARGET = 0.10

METHOD = (
    "Each configuration on fresh workers (the standard command line with its -P/-c changed; "
    "two workers: two such processes on the same queue), by the suite's one throughput "
    "method (benchmarks.throughput.compare, as the headline): a warm-up of each kind, then "
    "rounds of one batch of N per kind (plain no-op tasks and each 3-step no-op workflow "
    "the app defines; each durable batch after a CHECKPOINT), the order reversed every "
    "other round; a cell is the median of the rounds, its ratio the median of the "
    "per-round ratios (range in the JSON). Connections: each worker connects with "
    "application_name <run tag>/<worker>; pg_stat_activity rows per worker, read once "
    "after start-up, every 0.1 s during an untimed batch of each workflow after the "
    "timed rounds (peak), and 1 s after them (idle). Realistic work, on the standard "
    "worker, the same method: a plain task sleeping 15 ms against 3-step workflows whose "
    "steps each sleep 5 ms; overhead = the median over rounds of plain throughput / "
    "durable throughput - 1, with its range. In the full run this phase comes last, with "
    "the fill's finished runs in the tables."
)


def figures(s: dict[str, Any]) -> list[Figure]:
    io = s["io"]
    plain = io["plain"]["rate_per_s"]
    out = [
        Figure(
            "io_task_throughput",
            "plain task of 15 ms I/O throughput",
            plain,
            "tasks/s",
            note=f"on {s['io_config']}",
        )
    ]
    for name, x in io["durable"].items():
        out.append(
            Figure(
                f"io_workflow_throughput_{name}",
                f"durable {name}: 3 steps of 5 ms I/O, throughput",
                x["rate_per_s"],
                "workflows/s",
                note=f"{x['rate_per_s'] / plain:.2f} x the 15 ms task; "
                f"overhead {x['overhead']:+.1%}",
            )
        )
    return out


def targets(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Per item time of each I/O workflow against the 15 ms task: at most 1.10 x. As a
    ratio (1 + overhead) so that the value stays positive when noise favours durable."""
    plain = s["io"]["plain"]["rate_per_s"]
    del plain  # the ratio is the rounds' median (each round against its own plain batch)
    return [
        {
            "target": f"{name} (3 x 5 ms I/O) time per item / plain 15 ms task",
            "value": 1.0 + x["overhead"],
            "op": "<=",
            "threshold": 1.0 + IO_OVERHEAD_TARGET,
            "pass": 1.0 + x["overhead"] <= 1.0 + IO_OVERHEAD_TARGET,
            "note": f"overhead {x['overhead']:+.1%}{_range(x)}, on {s['io_config']}",
        }
        for name, x in s["io"]["durable"].items()
    ]


def _range(x: dict[str, Any]) -> str:
    """`` (rounds +4.1% to +9.0%)``: the overhead's range over the rounds, if measured so."""
    if "overhead_min" not in x:
        return ""
    return f" (rounds {x['overhead_min']:+.1%} to {x['overhead_max']:+.1%})"


def _ratio(x: dict[str, Any], plain: float) -> str:
    """A cell's ratio to plain: the rounds' median with its range, or the plain ratio."""
    if "vs_ref" in x:
        return f"{x['vs_ref']:.2f}, {x['vs_ref_min']:.2f}-{x['vs_ref_max']:.2f}"
    return f"{x['rate_per_s'] / plain:.2f}"


def table(s: dict[str, Any]) -> str:
    """Markdown: one row per configuration; what the README's Performance section shows."""
    names = s["workflows"]
    head = (
        ["workers", "plain tasks/s"]
        + [f"{name}/s (x plain: median, range)" for name in names]
        + ["PG connections per worker: start / busy / idle", "cores used by others"]
    )
    rows = [head, ["---"] * len(head)]
    for c in s["configs"]:
        plain = c["plain"]["rate_per_s"]
        conns = c["connections"]
        rows.append(
            [f"`{c['label']}`", f"{plain:.0f}"]
            + [
                f"{c['durable'][n]['rate_per_s']:.0f} ({_ratio(c['durable'][n], plain)})"
                for n in names
            ]
            + [
                f"{max(conns['at_start'].values(), default=0)} / {conns['per_worker_busy']} / "
                f"{conns['per_worker_idle']}",
                # Interference: what other programs took of the cores meanwhile (worst batch).
                f"{max(x['other_cores_busy'] for x in [c['plain'], *c['durable'].values()]):.2f}",
            ]
        )
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    two = two_against_one(s)
    if two:
        lines.append(two)
    io = s["io"]
    lines.append(
        f"Realistic work on `{s['io_config']}` (n={s['io_n']}): plain task of 15 ms I/O "
        f"{io['plain']['rate_per_s']:.0f}/s; "
        + "; ".join(
            f"{name} (3 steps of 5 ms) {x['rate_per_s']:.0f}/s, overhead {x['overhead']:+.1%}"
            f"{_range(x)}"
            for name, x in io["durable"].items()
        )
        + f". {_cells(s)}; load average {s['loadavg_start']} at start, "
        f"{s['loadavg_end']} at end."
    )
    return "\n".join(lines)


def _cells(s: dict[str, Any]) -> str:
    """What one throughput cell is: the rounds' median of batches of n."""
    method = s.get("method", {}).get("throughput")
    if method is None:
        return f"n={s['n']} per throughput cell"
    return f"each cell the median of {method['rounds']} interleaved rounds of n={method['n']}"


def two_against_one(s: dict[str, Any]) -> str:
    """Two workers' throughput over one's of the same pool and concurrency ("" if absent)."""
    by_shape = {(c["pool"], c["concurrency"], c["workers"]): c for c in s["configs"]}
    for (pool, conc, workers), two in by_shape.items():
        one = by_shape.get((pool, conc, 1))
        if workers == 2 and one is not None:
            ratios = [f"plain {two['plain']['rate_per_s'] / one['plain']['rate_per_s']:.2f} x"] + [
                f"{n} {two['durable'][n]['rate_per_s'] / one['durable'][n]['rate_per_s']:.2f} x"
                for n in s["workflows"]
            ]
            return f"Two workers against one (`{one['label']}`): {', '.join(ratios)}."
    return ""


def plot(s: dict[str, Any], path: Path) -> str:
    """Write the throughput and connection bars to ``path``; what was done, for the log.
    Without matplotlib (``pip install celery-durable[plot]``) there is no PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: write files only
        import matplotlib.pyplot as plt
    except ImportError:
        return "no PNG: matplotlib is not installed (pip install 'celery-durable[plot]')"
    configs = s["configs"]
    labels = [c["label"].replace(" x (", " x\n(") for c in configs]
    series = [("plain no-op task", [c["plain"]["rate_per_s"] for c in configs])] + [
        (f"durable {n}", [c["durable"][n]["rate_per_s"] for c in configs]) for n in s["workflows"]
    ]
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(9, 7), gridspec_kw={"height_ratios": [3, 1.4]}, constrained_layout=True
    )
    width = 0.8 / len(series)
    xs = range(len(configs))
    for i, (name, values) in enumerate(series):
        bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], values, width)
        bars.set_label(name)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("items / s")
    ax.set_title(f"Throughput by worker pool (n={s['n']}, load avg {s['loadavg_start'][0]})")
    ax.legend(fontsize=8)
    busy = [c["connections"]["per_worker_busy"] for c in configs]
    idle = [c["connections"]["per_worker_idle"] for c in configs]
    for offset, values, name in ((-0.2, busy, "busy (peak)"), (0.2, idle, "idle")):
        bars = ax2.bar([x + offset for x in xs], values, 0.4, label=name)
        ax2.bar_label(bars, fontsize=7)
    ax2.set_xticks(list(xs), labels, fontsize=8)
    ax2.set_ylabel("PG connections\nper worker")
    ax2.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def add_to(doc: dict[str, Any], s: dict[str, Any], png: Path) -> None:
    """Put the scale figures, target, method, table and PNG into the report ``doc``."""
    doc["figures"].update({f.name: f.as_dict() for f in figures(s)})
    doc["targets"] = doc["targets"] + targets(s)
    doc["methods"] = {**doc["methods"], "scale": METHOD}
    doc["scale_table"] = table(s)
    doc["scale_png"] = plot(s, png)


def run_only(
    args: Any,
    b: Any,
    machine: dict[str, Any],
    env: Mapping[str, str],
    log_dir: Path,
    progress: Callable[[str], None],
    wall_start: float,
) -> int:
    """``--scale-only``: migrate, the scale phase, the JSON, the PNG, the table; clean up."""
    from benchmarks import app as bench
    from benchmarks import scale
    from benchmarks.housekeeping import cleanup  # the suite's own clean-up
    from benchmarks.render import write_json
    from benchmarks.throughput import method_for

    queue = env["BENCH_QUEUE"]
    try:
        bench.durable.migrate()
        raw = scale.run(
            b,
            env,
            log_dir,
            progress,
            args.quick,
            method_for(args.quick, args.n, rounds=args.rounds),
        )
    finally:
        cleanup(b, queue, bench.app)
        bench.durable.runtime.store.dispose()
        b.monitor.close()
    doc: dict[str, Any] = {
        "schema": 1,
        "run_id": b.run_id,
        "started_at": wall_start,
        "scale_only": True,
        "quick": args.quick,
        "machine": {**machine, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"database_url": args.database_url, "broker": args.redis_url},
        "figures": {},
        "targets": [],
        "methods": {},
        "raw": {"scale": raw},
        "worker_logs": str(log_dir),
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    add_to(doc, raw, args.json.parent / "scale.png")
    write_json(doc, args.json)
    print(doc["scale_table"])
    print(doc["scale_png"], file=sys.stderr)
    for t in doc["targets"]:
        verdict = "PASS" if t["pass"] else "FAIL"
        print(f"[{verdict}] {t['target']}: {t['value']:.2f} {t['op']} {t['threshold']:g}")
    return 0
