"""The printed report, the machine's description, a figure's record and the JSON document
of a run.

Example::

    print(render(doc))
    write_json(doc, Path("benchmarks/results/latest.json"))
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Measurement tolerance of the commit counts (idle-rate subtraction), stated in the output.
COMMIT_TOLERANCE = 0.05


@dataclass
class Figure:
    """One figure of a run: its value and unit, its ratios to plain Celery, a note."""

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


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def render(doc: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = []
    m = doc["machine"]
    lines.append(
        f"machine: {m['nproc']} cores, {m['cpu_model']}, Postgres {m['postgres']['server_version']}"
        f" (synchronous_commit={m['postgres']['synchronous_commit']}, "
        f"autovacuum={m['postgres']['autovacuum']}), Redis {m['redis_version']}, "
        f"Python {m['python']}, Celery {m['celery']}"
    )
    lines.append(
        f"workers: {' '.join(doc['settings']['worker_command'][1:])}  "
        f"(acks_late, prefetch multiplier 1, Redis broker; load avg at start {m['loadavg_start']})"
    )
    lines.append(f"scale: n={doc['n']}{' (quick)' if doc['quick'] else ''}")
    if doc["settings"].get("py_spy"):
        lines.append(
            f"py-spy flame graphs in {doc['settings']['py_spy']}: the empty-table durable "
            "throughput was measured under profiling and is perturbed"
        )
    lines.append("")
    width = max(len(f["label"]) for f in doc["figures"].values())
    header = f"{'figure':<{width}} {'value':>12} {'unit':<12} {'vs task':>8} {'vs chain':>8}  note"
    lines.append(header)
    lines.append("-" * len(header))
    for f in doc["figures"].values():
        lines.append(
            f"{f['label']:<{width}} {_fmt(f['value']):>12} {f['unit']:<12} "
            f"{_fmt(f['vs_plain_task']):>8} {_fmt(f['vs_plain_chain']):>8}  {f['note']}"
        )
    lines.append("")
    lines.append(
        "ratios: throughput vs plain task and vs plain chain throughput; latencies and "
        "replay vs plain task latency (p50 vs p50, p99 vs p99)"
    )
    lines.append("")
    lines.append("CPU per item, ms (driver / worker / postgres / redis / other), cores busy:")
    raw = doc["raw"]
    for key, label in (
        ("plain_tasks", "plain task"),
        ("plain_chains", "plain 3-task chain"),
        ("durable_empty", "durable 3-step, empty"),
        ("durable_no_backend", "durable 3-step, no backend"),
        ("deferred_empty", "durable 3 deferred steps, empty"),
        ("durable_filled", "durable 3-step, filled"),
    ):
        x = raw[key]
        c = x["cpu_ms_per_item"]
        parts = " / ".join(
            f"{c[k]:.2f}" for k in ("driver", "worker", "postgres", "redis", "other")
        )
        wal = (
            f", WAL {x['wal_bytes_per_item'] / 1024:.1f} KiB/item"
            if "wal_bytes_per_item" in x
            else ""
        )
        lines.append(
            f"  {label:<31} {parts}  ({x['cpu_cores_busy']:.2f} cores, "
            f"{x['other_cores_busy']:.2f} by others{wal})"
        )
    busy = max(
        raw[k]["other_cores_busy"]
        for k in (
            "plain_tasks",
            "plain_chains",
            "durable_empty",
            "durable_no_backend",
            "durable_filled",
        )
    )
    if busy > 0.1:
        lines.append(
            f"  WARNING: other processes used up to {busy:.2f} cores during a measurement; "
            "throughput figures are disturbed"
        )
    if doc.get("scale_table"):
        lines.append("")
        lines.append("scale (fresh workers per row; x plain: the same workers' plain throughput):")
        lines.append(doc["scale_table"])
        lines.append(doc["scale_png"])
    kill = raw.get("kill")
    if kill:
        lines.append("")
        lines.append(
            f"SIGKILL of the worker while items of a {kill['items']}-item fan-out run "
            f"(fresh worker started, wait up to {kill['deadline_s']:.0f} s):"
        )
        for system, label in (("chord", "Celery chord"), ("map", "durable cd.map")):
            k = kill[system]
            lines.append(
                f"  {label:<14} completed={k['completed']}: {k['outcome']} "
                f"({k['items_running_at_kill']} items running at the kill, "
                f"{k['items_finished']} item executions finished)"
            )
    lines.extend(_chord_kill(raw.get("kill_chord")))
    lines.append("")
    lines.append("targets:")
    for t in doc["targets"]:
        verdict = "PASS" if t["pass"] else "FAIL"
        lines.append(
            f"  [{verdict}] {t['target']}: {_fmt(t['value'])} {t['op']} {_fmt(t['threshold'])}"
            + (f"  ({t['note']})" if t["note"] else "")
        )
    lines.append(f"  (commit targets allow a measurement tolerance of {COMMIT_TOLERANCE})")
    lines.append("")
    lines.append(f"total runtime: {doc['runtime_s']:.0f} s; JSON: {doc.get('json_path', '-')}")
    return "\n".join(lines)


def _chord_kill(kill: dict[str, Any] | None) -> list[str]:
    """The chord of workflows against the chord of tasks, a header member's worker killed."""
    if not kill:
        return []
    lines = [
        "",
        f"SIGKILL of the worker while members of a chord of {kill['items']} run, plain "
        f"callback (fresh worker started, wait up to {kill['deadline_s']:.0f} s):",
    ]
    for system, label in (("durable", "of workflows"), ("plain", "of tasks")):
        k = kill[system]
        when = (
            f"{k['seconds_after_kill']:.1f} s after the kill"
            if k["completed"]
            else f"no callback within {kill['deadline_s']:.0f} s of the fresh worker's start"
        )
        lines.append(
            f"  chord {label:<12} completed={k['completed']}, callback runs={k['callback_runs']}"
            f", all {kill['items']} results={k['all_results']}: {when} "
            f"({k['items_running_at_kill']} members running at the kill, {k['items_started']} "
            f"starts, {k['items_finished']} finished, {k['header_succeeded']} succeeded, "
            f"{k['unacked_deliveries']} deliveries left unacknowledged)"
        )
    return lines


def machine_info(postgres: dict[str, str], redis_version: str) -> dict[str, Any]:
    import celery

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "celery": celery.__version__,
        "postgres": postgres,
        "redis_version": redis_version,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def target(
    name: str,
    value: float,
    op: str,
    threshold: float,
    slack: float = 0.0,
    note: str = "",
    *,
    ok: bool | None = None,
) -> dict[str, Any]:
    """A target's verdict as the JSON keeps it: ``value`` ``op`` ``threshold`` within
    ``slack`` (a measurement tolerance), or ``ok``, given, for any other ``op``."""
    if ok is None:
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


def report_phase(
    phase: str,
    args: Any,
    run_id: str,
    method: Any,
    machine: dict[str, Any],
    figures: list[Figure],
    targets: list[dict[str, Any]],
    raw: dict[str, Any],
    wall_start: float,
    methods: dict[str, str],
) -> dict[str, Any]:
    """A ``--<phase>-only`` run's JSON document (written to ``args.json``), its figures
    and targets printed; returns the document."""
    import time
    from dataclasses import asdict

    doc = {
        "schema": 1,
        "run_id": run_id,
        "started_at": wall_start,
        f"{phase}_only": True,
        "quick": args.quick,
        "throughput_method": asdict(method),
        "machine": {**machine, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"database_url": args.database_url, "broker": args.redis_url},
        "figures": {f.name: f.as_dict() for f in figures},
        "targets": targets,
        "methods": methods,
        "raw": raw,
        "runtime_s": time.time() - wall_start,
        "json_path": str(args.json),
    }
    write_json(doc, args.json)
    for f in figures:
        print(f"{f.label}: {f.value:.2f} {f.unit}  ({f.note})")
    for t in targets:
        verdict = "PASS" if t["pass"] else "FAIL"
        print(f"[{verdict}] {t['target']}: {t['value']:.2f} {t['op']} {t['threshold']:g}")
    return doc
