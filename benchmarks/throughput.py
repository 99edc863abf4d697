"""The one throughput method of the suite: plain tasks against durable workflows, on one
worker, in interleaved rounds.

Every throughput figure (the headline, the filled tables, each scale configuration, the
realistic-work figure) comes from :func:`compare`, so the headline's ``-P prefork -c 2``
ratio and the scale table's ``-c 2`` row are the same measurement. A single batch on two
shared cores moves by tens of percent from one batch to the next, and the first kind of a
comparison measured minutes before the others drifts with the machine's load. So:

- every kind is measured on the same worker, after a warm-up of each kind;
- ``rounds`` rounds of one batch of N per kind, the order reversed every other round
  (plain, durable ... / durable ..., plain), each durable batch after a CHECKPOINT;
- a kind's figure is the median of its rounds; its ratio to the reference (the first kind,
  the plain task) is the median of the per-round ratios (same round, seconds apart), with
  their range as the spread.

Example::

    result = compare(b, Method(1000, 50, 3), [plain_kind(), durable_kind("three_steps")])
    result["kinds"]["three_steps"]["vs_ref"]      # median of the per-round ratios
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.measure import Bench

# The measurements import the app, which reads its settings from the environment at import:
# they are imported on use, so that the CLI can read ``method_for`` before it sets them.

Batch = Callable[["Bench", int], dict[str, Any]]


@dataclass(frozen=True)
class Method:
    """N per batch, the warm-up batch of each kind, the rounds."""

    n: int
    warmup: int
    rounds: int


# The default method of every throughput figure (quick: a smoke run, no confidence).
FULL = Method(1000, 50, 3)
QUICK = Method(60, 10, 2)
# Realistic work: items of ~20 ms, so a smaller N for the same few seconds per batch.
IO_FULL = Method(400, 40, 3)
IO_QUICK = Method(40, 10, 2)


def method_for(
    quick: bool, n: int | None = None, io: bool = False, rounds: int | None = None
) -> Method:
    """The method of a run (``--quick``, ``--n``, ``--rounds``); ``io``: the realistic-work
    one, whose N ``--n`` does not change (its items take ~20 ms)."""
    base = (IO_QUICK if quick else IO_FULL) if io else (QUICK if quick else FULL)
    return Method(n if n and not io else base.n, base.warmup, rounds if rounds else base.rounds)


@dataclass(frozen=True)
class Kind:
    """What one batch of a comparison runs: ``batch(b, n)`` returns measure's figures."""

    name: str
    batch: Batch


def plain_kind(name: str = "plain", task: Any = None) -> Kind:
    from benchmarks import measure

    return Kind(name, lambda b, n: measure.plain_tasks(b, n, task=task))


def chain_kind(name: str = "plain_chains") -> Kind:
    from benchmarks import measure

    return Kind(name, measure.plain_chains)


def durable_kind(name: str, workflow: Any = None, **options: Any) -> Kind:
    """``workflow`` (default: the app's workflow of that name), started with ``.delay()``
    or, given ``options``, ``apply_async(**options)``; each batch after a CHECKPOINT, so
    that no batch pays for flushing another's writes."""
    from benchmarks import app as bench
    from benchmarks import measure

    flow = workflow if workflow is not None else getattr(bench, name)
    return Kind(
        name,
        lambda b, n: measure.durable_throughput(
            b, n, checkpoint=True, workflow=flow, options=options
        ),
    )


# The result-backend figure: the 3-step workflow as every durable kind starts it (its runs
# store their final state in the app's Redis result backend when they settle) against the
# same workflow started with ignore_result=True (no canvas, no report: as without a
# backend), in the same comparison. The issue's target: within 10%.
WITH_BACKEND = "three_steps"
NO_BACKEND = "three_steps_no_backend"
BACKEND_TARGET = 0.90


def no_backend_kind(name: str = NO_BACKEND, workflow: str = WITH_BACKEND) -> Kind:
    """The app's ``workflow`` started with ``ignore_result=True``: nothing to report."""
    from benchmarks import app as bench

    return durable_kind(name, getattr(bench, workflow), ignore_result=True)


def compare(b: Bench, method: Method, kinds: Sequence[Kind]) -> dict[str, Any]:
    """Warm up every kind, then ``method.rounds`` rounds of one batch of N per kind.

    Returns ``{"method", "order", "kinds": {name: summary}}``; a summary is the median
    round's batch (its CPU, WAL, publish figures) with ``rate_per_s`` the median of the
    rounds, ``rates``, and, for every kind but the first, ``vs_ref`` (the median of the
    per-round ratios to the first kind), ``vs_ref_min``/``vs_ref_max`` and ``ratios``."""
    if not kinds:
        raise ValueError("nothing to compare")
    for kind in kinds:
        kind.batch(b, method.warmup)
    batches: dict[str, list[dict[str, Any]]] = {k.name: [] for k in kinds}
    order: list[list[str]] = []
    for i in range(method.rounds):
        ordered = list(kinds) if i % 2 == 0 else list(reversed(kinds))
        order.append([k.name for k in ordered])
        for kind in ordered:
            batches[kind.name].append(kind.batch(b, method.n))
    ref = kinds[0].name
    reference = [x["rate_per_s"] for x in batches[ref]]
    out: dict[str, Any] = {}
    for kind in kinds:
        summary = _summary(batches[kind.name])
        if kind.name != ref:
            ratios = [
                x["rate_per_s"] / r for x, r in zip(batches[kind.name], reference, strict=True)
            ]
            summary.update(
                vs_ref=statistics.median(ratios),
                vs_ref_min=min(ratios),
                vs_ref_max=max(ratios),
                ratios=ratios,
            )
        out[kind.name] = summary
    return {"method": asdict(method), "reference": ref, "order": order, "kinds": out}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [x["rate_per_s"] for x in runs]
    median = statistics.median(rates)
    middle = min(runs, key=lambda x: abs(x["rate_per_s"] - median))
    return {
        **middle,
        "rate_per_s": median,
        "rates": rates,
        "rate_min": min(rates),
        "rate_max": max(rates),
        "other_cores_busy": max(x["other_cores_busy"] for x in runs),
        "rounds": runs,
    }


def ratio_between(result: dict[str, Any], kind: str, other: str) -> dict[str, Any]:
    """``kind``'s rate over ``other``'s, round by round, in one :func:`compare` (each pair
    of batches seconds apart on the same worker): the median, its range, the ratios."""
    kinds = result["kinds"]
    ratios = [a / b for a, b in zip(kinds[kind]["rates"], kinds[other]["rates"], strict=True)]
    return {
        "of": kind,
        "to": other,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratios": ratios,
    }


def backend_report(result: dict[str, Any]) -> dict[str, Any]:
    """With the result backend / without, from a comparison of ``WITH_BACKEND`` and
    ``NO_BACKEND``; refuses one whose runs did not report (or not report) as labelled."""
    for name, reports in ((WITH_BACKEND, True), (NO_BACKEND, False)):
        for x in result["kinds"][name]["rounds"]:
            if x["reporting"] != (x["n"] if reports else 0):
                raise RuntimeError(
                    f"{name}: {x['reporting']} of {x['n']} runs report to the result backend"
                )
    ratio = ratio_between(result, WITH_BACKEND, NO_BACKEND)
    return {**ratio, "target": BACKEND_TARGET, "pass": ratio["ratio"] >= BACKEND_TARGET}


def show_backend(x: dict[str, Any]) -> str:
    """``0.97 (0.95-0.99)``: with the backend / without, its range over rounds."""
    return f"{x['ratio']:.2f} ({x['ratio_min']:.2f}-{x['ratio_max']:.2f})"


def spread(summary: dict[str, Any]) -> str:
    """``0.93 (0.88-0.97)``: the median ratio to the reference and its range over rounds."""
    return f"{summary['vs_ref']:.2f} ({summary['vs_ref_min']:.2f}-{summary['vs_ref_max']:.2f})"


def run_only(b: Bench, method: Method, progress: Callable[[str], None]) -> None:
    """``--throughput-only``: plain tasks, strict 3-step workflows with and without the
    result backend's report, deferred ones, on the running worker; prints the comparison
    and each kind's CPU per item by component."""
    result = compare(
        b,
        method,
        [
            plain_kind("plain_tasks"),
            durable_kind(WITH_BACKEND),
            no_backend_kind(),
            durable_kind("three_deferred"),
        ],
    )
    progress(f"throughput (empty tables): {describe(result)}")
    for name, kind in result["kinds"].items():
        split = ", ".join(f"{k} {v:.2f}" for k, v in kind["cpu_ms_per_item"].items())
        progress(f"{name}: CPU ms per item: {split}; publish {kind['publish_s']:.2f} s")


def describe(result: dict[str, Any]) -> str:
    """One progress line: each kind's median rate, and its ratio to the reference."""
    parts = []
    for name, x in result["kinds"].items():
        ratio = f" = {spread(x)} x {result['reference']}" if "vs_ref" in x else ""
        parts.append(
            f"{name} {x['rate_per_s']:.1f}/s{ratio} (others up to {x['other_cores_busy']:.2f})"
        )
    if {WITH_BACKEND, NO_BACKEND} <= set(result["kinds"]):
        backend = backend_report(result)
        parts.append(
            f"{WITH_BACKEND} with / without the result backend = {show_backend(backend)} "
            f"(target >= {BACKEND_TARGET:.2f})"
        )
    m = result["method"]
    return f"{'; '.join(parts)}; {m['rounds']} rounds of n={m['n']}"
