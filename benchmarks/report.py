"""Figures, ratios to plain Celery, targets, the printed table and the JSON document."""

from __future__ import annotations

from typing import Any

# The printed report, the JSON document and a figure's record live in ``render``, the
# methods' texts in ``methods`` (importable from here too): the phases import those, so
# this module's imports of their figures make no circle.
from benchmarks.methods import METHODS
from benchmarks.render import (
    COMMIT_TOLERANCE,
    Figure,
    machine_info,
    render,
    target,
    write_json,
)

__all__ = ["COMMIT_TOLERANCE", "METHODS", "Figure", "machine_info", "render", "write_json"]


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
    from benchmarks.aio import async_figures

    figures.extend(async_figures(r))
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
