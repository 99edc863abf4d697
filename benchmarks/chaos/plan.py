"""What a chaos run does and when: the workflows, their signals, the faults. Pure, seeded.

The workflow body (``benchmarks.chaos.app.flow``) and the driver's expected value share
:func:`mix`; everything else here is decided from the seed before the run starts, so two
runs with the same seed start the same workflows and inject the same faults at the same
offsets.

Example::

    plan = make_plan(scale_for(quick=True, workflows=None), seed=7)
    plan.workflows[0].expected()        # what that run must return
    [f.kind for f in plan.faults]       # ['kill', 'pg_stop', 'pause', ...]
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

STEPS = 5  # work steps per workflow
KINDS = ("plain", "signal", "sleep", "both")
WAIT_BEFORE = 2  # the signal wait comes before work step 2
SLEEP_BEFORE = 3  # the durable sleep comes before work step 3
SLEEP_SECONDS = 1.0
SIGNAL = "go"
FAULT_KINDS = ("kill", "broker", "pg_stop", "pg_crash", "pause")


def mix(acc: int, value: int, index: int) -> int:
    """One work step's output from the previous one: order- and value-sensitive."""
    return (acc * 31 + value * 7 + index) % 1_000_003


def expected_result(seed: int, kind: str, payload: int | None) -> dict[str, int]:
    """The value ``flow(seed, kind)`` must return when its signal carried ``payload``."""
    acc = seed
    for i in range(STEPS):
        if i == WAIT_BEFORE and kind in ("signal", "both"):
            assert payload is not None
            acc = mix(acc, payload, 100)
        acc = mix(acc, seed, i)
    return {"acc": acc, "steps": STEPS}


def step_seconds(seed: int, index: int) -> float:
    """How long work step ``index`` of ``seed`` runs: 20-120 ms, so faults land mid-step."""
    return 0.02 + ((seed * 13 + index * 29) % 101) / 1000


@dataclass(frozen=True)
class Scale:
    """How much one broker's run does (seconds are offsets from the first start)."""

    workflows: int
    load_seconds: float  # starts are spread over this window
    faults: tuple[tuple[str, float], ...]  # (kind, offset) before jitter
    stuck_after: float  # a run not final this long after the last fault is stuck
    lost_after: float  # ...and lost if still not final this much later


QUICK_FAULTS = (
    ("kill", 4.0),
    ("pg_stop", 8.0),
    ("pause", 14.0),
    ("broker", 23.0),
    ("pg_crash", 28.0),
    ("kill", 31.0),
)
FULL_FAULTS = tuple(
    (kind, 6.0 + 10.0 * n)
    for n, kind in enumerate(
        (
            "kill",
            "pg_stop",
            "kill",
            "pause",
            "broker",
            "kill",
            "pg_crash",
            "kill",
            "pause",
            "broker",
            "kill",
            "pg_stop",
            "kill",
            "pg_crash",
            "kill",
        )
    )
)


def scale_for(quick: bool, workflows: int | None) -> Scale:
    if quick:
        base = Scale(48, 30.0, QUICK_FAULTS, 30.0, 30.0)
    else:
        base = Scale(300, 150.0, FULL_FAULTS, 45.0, 60.0)
    if workflows is None:
        return base
    return Scale(workflows, base.load_seconds, base.faults, base.stuck_after, base.lost_after)


@dataclass
class WorkflowPlan:
    """One workflow run: its inputs, when it starts, and its signal (if it waits for one)."""

    id: str
    seed: int
    kind: str
    start_at: float
    signal_at: float | None = None
    signal_via: str | None = None  # "handle" (store, then wake) or "broker" (send_signal)
    payload: int | None = None

    @property
    def signal_key(self) -> str:
        return f"{self.id}:{SIGNAL}"

    def expected(self) -> dict[str, int]:
        return expected_result(self.seed, self.kind, self.payload)

    @property
    def waits(self) -> bool:
        return self.kind in ("signal", "both")


@dataclass
class FaultPlan:
    """One fault: ``duration`` is the outage or pause length (0 for a kill)."""

    kind: str
    at: float
    duration: float
    target: int | None = None  # preferred worker index (kill, pause)


@dataclass
class Plan:
    seed: int
    scale: Scale
    workflows: list[WorkflowPlan] = field(default_factory=list)
    faults: list[FaultPlan] = field(default_factory=list)

    @property
    def last_fault_end(self) -> float:
        return max((f.at + f.duration for f in self.faults), default=0.0)

    def describe(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "scale": asdict(self.scale),
            "faults": [asdict(f) for f in self.faults],
        }


def fault_duration(kind: str, lock_timeout: float) -> float:
    """Outage or pause length: a pause outlives the lease (2 x lock_timeout + 1 s)."""
    return {
        "kill": 0.0,
        "broker": 5.0,
        "pg_stop": 5.0,
        "pg_crash": 2.0,
        "pause": 2 * lock_timeout + 1.0,
    }[kind]


def make_plan(scale: Scale, seed: int, run_id: str, lock_timeout: float = 3.0) -> Plan:
    """Decide every start, signal and fault of a run from ``seed``."""
    rng = random.Random(seed)
    plan = Plan(seed, scale)
    count = max(1, scale.workflows)
    for n in range(count):
        kind = KINDS[n % len(KINDS)]
        start = scale.load_seconds * n / count + rng.uniform(0, scale.load_seconds / count)
        wf = WorkflowPlan(f"chaos-{run_id}-{n:05d}", rng.randrange(1, 1_000_000), kind, start)
        if wf.waits:
            # Sometimes before the run reaches its wait (the signal is kept), mostly after.
            wf.signal_at = start + rng.uniform(0.1, 4.0)
            wf.signal_via = "handle" if n % 8 < 4 else "broker"
            wf.payload = rng.randrange(1000)
        plan.workflows.append(wf)
    kills = 0
    for kind, offset in scale.faults:
        target = None
        if kind in ("kill", "pause"):
            target = kills % 2
            kills += 1
        at = offset + rng.uniform(-1.0, 1.0)
        plan.faults.append(
            FaultPlan(kind, max(1.0, at), fault_duration(kind, lock_timeout), target)
        )
    plan.faults.sort(key=lambda f: f.at)
    return plan


def work_indexes(kind: str) -> list[int]:
    """The store indexes of the work steps of a ``kind`` run (waits take indexes too)."""
    indexes, idx = [], 0
    for i in range(STEPS):
        if i == WAIT_BEFORE and kind in ("signal", "both"):
            idx += 1
        if i == SLEEP_BEFORE and kind in ("sleep", "both"):
            idx += 1
        indexes.append(idx)
        idx += 1
    return indexes
