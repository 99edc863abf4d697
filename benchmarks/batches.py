"""Batched fan-out (issue 26): a durable ``cd.map`` of 1,000 no-op items with
``batch_size=50`` against a Celery ``chord`` of 1,000 no-op tasks and a ``chord`` over
``noop.chunks(..., 50)`` (each with a no-op callback, Redis result backend), on the fan-out
benchmark's fresh worker, in interleaved rounds (the order reversed every other round);
and the batched map's commits per item.

A figure is the median of its rounds, a ratio the median of the per-round ratios, with
their range. Clocks: first start to the callback's ``date_done`` (chords), to the run's
``finished_at`` (the map; both the database's and Redis's clocks are this host's).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from celery import chord
from celery.result import AsyncResult

from benchmarks import app as bench
from benchmarks import cpu
from benchmarks.measure import Bench, _cpu_per_item, _epoch, _remember, wait_finished
from benchmarks.windows import commit_window

ITEMS, SIZE, ROUNDS = 1_000, 50, 3
# Issue 26's targets: items/s of the batched map over each chord's.
TARGETS = {"chord": 3.0, "chunks": 1.0}


def _chord_of_tasks(items: int) -> AsyncResult:
    return chord(bench.noop.s() for _ in range(items))(bench.noop.s())


def _chord_of_chunks(items: int, size: int) -> AsyncResult:
    return chord(bench.noop.chunks(((i,) for i in range(items)), size).group())(bench.noop.s())


def _chord_round(b: Bench, make: Callable[[], AsyncResult], items: int) -> dict[str, Any]:
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    result = make()
    result.get(timeout=300, interval=0.01)
    seen = time.time()
    _remember(b, result)
    for child in getattr(result.parent, "results", None) or []:
        b.result_ids.append(child.id)
    elapsed = _epoch(result.date_done) - start
    return {
        "elapsed_s": elapsed,
        "items_per_s": items / elapsed,
        **_usage(b, before, items, seen - start),
    }


def _map_round(b: Bench, items: int, size: int | str) -> dict[str, Any]:
    before = cpu.snapshot(b.monitor.database)
    start = time.time()
    ids = [bench.batched_map.delay(items, size).id]
    wait_finished(b, ids, timeout=300, interval=0.01)
    seen = time.time()
    if b.monitor.count_status(ids, "SUCCEEDED") != 1:
        raise RuntimeError(f"the batched map {ids[0]} did not succeed")
    marks = b.monitor.map_marks(ids[0])
    elapsed = marks[-1] - start  # the run's finished_at
    return {
        "elapsed_s": elapsed,
        "items_per_s": items / elapsed,
        "marks_ms": {name: (at - start) * 1000 for name, at in zip(MARKS, marks, strict=True)},
        **_usage(b, before, items, seen - start),
    }


# Where a map's time goes, in ms after its .delay(): the parent's delivery reaches the
# insert of its item rows; the batches record; the last record wakes the parent, whose
# second delivery replays the body and settles. The chunks pay none of the parent's part.
MARKS = ("items_insert", "first_recorded", "last_recorded", "finished")


def _usage(b: Bench, before: cpu.Snapshot, items: int, seen: float) -> dict[str, Any]:
    usage = _cpu_per_item(b, before, items, seen)
    return {"cpu_ms_per_item": usage["cpu_ms_per_item"]}


def compare(
    b: Bench,
    progress: Callable[[str], None],
    idle_rate: float,
    items: int = ITEMS,
    size: int = SIZE,
    rounds: int = ROUNDS,
) -> dict[str, Any]:
    """The three on the worker already running: a warm-up of each, ``rounds`` rounds, then
    one commit window around a batched map."""
    kinds: dict[str, Callable[[], dict[str, Any]]] = {
        "chord": lambda: _chord_round(b, lambda: _chord_of_tasks(items), items),
        "chunks": lambda: _chord_round(b, lambda: _chord_of_chunks(items, size), items),
        "map": lambda: _map_round(b, items, size),
    }
    for measure in kinds.values():
        measure()  # warm-up
    samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for number in range(rounds):
        order = list(kinds) if number % 2 == 0 else list(reversed(kinds))
        for kind in order:
            samples[kind].append(kinds[kind]())
    out: dict[str, Any] = {"items": items, "batch_size": size, "rounds": rounds}
    for kind, taken in samples.items():
        rates = [s["items_per_s"] for s in taken]
        out[kind] = {
            "items_per_s": statistics.median(rates),
            "cpu_ms_per_item": _median_usage(taken),
            "rounds": taken,
        }
    out["map"]["marks_ms"] = {
        mark: statistics.median(s["marks_ms"][mark] for s in samples["map"]) for mark in MARKS
    }
    for against in ("chord", "chunks"):
        ratios = [
            m["items_per_s"] / c["items_per_s"]
            for m, c in zip(samples["map"], samples[against], strict=True)
        ]
        out[f"vs_{against}"] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "target": TARGETS[against],
            "pass": statistics.median(ratios) >= TARGETS[against],
        }
    window = commit_window(b, lambda: _map_round(b, items, size))
    net = window.others - idle_rate * window.seconds
    out["commits"] = {
        "per_item": net / items,
        "per_map": net,
        "clean": window.clean,
        "window": window.as_dict(),
    }
    progress(describe(out))
    return out


def _median_usage(taken: list[dict[str, Any]]) -> dict[str, float]:
    """Each process group's CPU ms per item, the median of the rounds."""
    groups = taken[0]["cpu_ms_per_item"]
    return {g: statistics.median(s["cpu_ms_per_item"][g] for s in taken) for g in groups}


def _cpu_line(usage: dict[str, float]) -> str:
    """CPU ms per 1,000 items, by process group: where a kind's time goes."""
    return ", ".join(f"{group} {ms * 1000:.0f}" for group, ms in usage.items())


def describe(x: dict[str, Any]) -> str:
    """One progress line."""
    vs = ", ".join(
        f"{x[f'vs_{k}']['median']:.2f} x {k} ({x[f'vs_{k}']['min']:.2f}-{x[f'vs_{k}']['max']:.2f}; "
        f"target {x[f'vs_{k}']['target']:.0f} x: {'PASS' if x[f'vs_{k}']['pass'] else 'FAIL'})"
        for k in ("chord", "chunks")
    )
    return (
        f"batched map of {x['items']} (batch_size={x['batch_size']}): "
        f"{x['map']['items_per_s']:,.0f} items/s; chord {x['chord']['items_per_s']:,.0f}, "
        f"chord over chunks {x['chunks']['items_per_s']:,.0f}; {vs}; "
        f"{x['commits']['per_item']:.3f} commits per item; the map's marks, ms after its "
        f"start (median): {_marks_line(x['map']['marks_ms'])}; CPU ms per 1,000 items (median "
        f"of the rounds): map {_cpu_line(x['map']['cpu_ms_per_item'])}; chunks "
        f"{_cpu_line(x['chunks']['cpu_ms_per_item'])}"
    )


def _marks_line(marks: dict[str, float]) -> str:
    return ", ".join(f"{mark.replace('_', ' ')} {ms:.1f}" for mark, ms in marks.items())


# Commits per item of the batched map: a batch costs its claim and its record whatever its
# size (2 / 50 = 0.04 per item) and the map a few of its own (start, wake-up, settle); one
# task per item costs 1. Issue 26 asks for the figure; this bound says "per batch, not per
# item", with room for a record per lease beat.
COMMITS_PER_ITEM = 0.1


def batches_figures(x: dict[str, Any] | None) -> list[Any]:
    """The batched fan-out's figures (``compare``'s result; none without it)."""
    from benchmarks.render import Figure

    if not x:
        return []
    n, size = x["items"], x["batch_size"]
    label, rate = f"cd.map of {n:,} no-op items, batch_size={size}", "items/s"
    figures = [
        Figure("batched_map_items_per_s", label, x["map"]["items_per_s"], rate),
        Figure("batched_chord_items_per_s", f"chord of {n:,}", x["chord"]["items_per_s"], rate),
        Figure(
            "batched_chunks_items_per_s",
            f"chord over chunks(..., {size}) of {n:,}",
            x["chunks"]["items_per_s"],
            "items/s",
        ),
    ]
    for kind in ("chord", "chunks"):
        q = x[f"vs_{kind}"]
        figures.append(
            Figure(
                f"batched_map_vs_{kind}",
                f"{label} / {'chord' if kind == 'chord' else 'chord over chunks'}",
                q["median"],
                "x",
                note=f"median of {x['rounds']} rounds; rounds {q['min']:.2f}-{q['max']:.2f}",
            )
        )
    for kind, name in (("map", "cd.map"), ("chunks", "chord over chunks")):
        figures.append(
            Figure(
                f"batched_{kind}_cpu_ms_per_1000_items",
                f"CPU per 1,000 items, {name} (median of the rounds)",
                sum(x[kind]["cpu_ms_per_item"].values()) * 1000,
                "ms",
                note=_cpu_line(x[kind]["cpu_ms_per_item"]),
            )
        )
    marks = x["map"]["marks_ms"]
    chunks_ms = x["items"] / x["chunks"]["items_per_s"] * 1000
    figures.append(
        Figure(
            "batched_map_finished_ms",
            f"{label}: start to finish (median of the rounds)",
            marks["finished"],
            "ms",
            note=f"items inserted from {marks['items_insert']:.1f}, first recorded "
            f"{marks['first_recorded']:.1f}, last recorded {marks['last_recorded']:.1f} "
            f"ms; the chord over chunks: {chunks_ms:.1f} ms in all",
        )
    )
    c = x["commits"]
    figures.append(
        Figure(
            "batched_map_commits_per_item",
            f"DB commits per item of a {label}, all in",
            c["per_item"],
            "commits",
            note=("" if c["clean"] else "NOT CLEAN; ") + f"{c['per_map']:.1f} per map",
        )
    )
    return figures


def batches_targets(x: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Issue 26's fan-out targets: items/s over a chord's and a chord over chunks', same
    worker, same rounds; commits per item."""
    if not x:
        return []
    targets = []
    for kind, against in (("chord", "a chord"), ("chunks", "a chord over chunks")):
        q = x[f"vs_{kind}"]
        targets.append(
            {
                "target": f"cd.map of {x['items']:,}, batch_size={x['batch_size']}, items/s / "
                f"{against} of {x['items']:,}, same rounds",
                "value": q["median"],
                "op": ">=",
                "threshold": q["target"],
                "pass": q["pass"],
                "note": f"rounds {q['min']:.2f}-{q['max']:.2f}",
            }
        )
    c = x["commits"]
    targets.append(
        {
            "target": f"DB commits per item of a cd.map of {x['items']:,}, "
            f"batch_size={x['batch_size']}, all in",
            "value": c["per_item"],
            "op": "<=",
            "threshold": COMMITS_PER_ITEM,
            "pass": c["per_item"] <= COMMITS_PER_ITEM,
            "note": "" if c["clean"] else "other sessions were active: not clean",
        }
    )
    return targets
