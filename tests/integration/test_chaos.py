"""The chaos suite's short form, ``python -m benchmarks.chaos --quick``, on the session's broker.

About a minute: 48 workflows under 6 faults (two worker SIGKILLs, a Postgres stop, a
crash-like Postgres cut, a broker restart, a worker paused past its lease). Nothing may be
lost, stuck, wrong or re-run after its record committed, and no worker may exit on its
own. On failure the message names the report, whose ``details`` list every case.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.chaos.plan import make_plan, scale_for, work_indexes
from benchmarks.chaos.verdict import RunRow, SignalRow, judge
from tests.support.services import AMQP_URL, BROKER, PG_URL, REDIS_URL
from tests.support.workers import ROOT, clean_env

SUMMARY = re.compile(r"^chaos: broker=(\w+) ((?:\w+=\d+ ?)+)$", re.MULTILINE)
MUST_BE_ZERO = ("lost", "stuck", "wrong", "rerun_after_commit", "worker_self_exits")


@pytest.mark.broker
@pytest.mark.serial  # six timed faults on its own workers: run with nothing else
@pytest.mark.timeout(200)
def test_quick_chaos_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.chaos",
            "--quick",
            "--broker",
            BROKER,
            "--database-url",
            PG_URL,
            "--redis-url",
            REDIS_URL,
            "--amqp-url",
            AMQP_URL,
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        cwd=ROOT,
        env=clean_env(),  # the suite configures its own app, not the test session's
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = SUMMARY.search(proc.stdout)
    assert found, f"no summary line\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    assert found.group(1) == BROKER
    counters = {k: int(v) for k, v in (pair.split("=") for pair in found.group(2).split())}
    details = json.loads(out.read_text()).get("details", {}) if out.exists() else {}
    nonzero = {name: details.get(name) for name in MUST_BE_ZERO if counters[name] != 0}
    if counters["lost"]:
        nonzero["lost_signals"] = details.get("lost_signals")
        nonzero["signals_dropped_by_worker"] = details.get("signals_dropped_by_worker")
    assert not nonzero, f"{found.group(0)}\n{json.dumps(nonzero, indent=1)[:6000]}"
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    assert counters["workflows"] == 48 and counters["steps"] == 240
    assert counters["faults"] == 6


def test_the_verdict_counts_each_kind_of_damage() -> None:
    """The counters are live: a clean outcome counts nothing, each kind of damage counts."""
    plan = make_plan(scale_for(quick=True, workflows=8), seed=1, run_id="unit")
    runs, steps, executions, signals = {}, {}, {}, {}
    for wf in plan.workflows:
        runs[wf.id] = RunRow("SUCCEEDED", json.dumps(wf.expected()), None, 1, 0)
        steps[wf.id] = {i: "ok" for i in work_indexes(wf.kind)}
        executions.update({f"{wf.id}:{i}": "1" for i in work_indexes(wf.kind)})
        if wf.waits:
            signals[wf.signal_key] = SignalRow(consumed=True, error=None)
    started = {wf.id for wf in plan.workflows}
    clean = judge(plan, started, runs, signals, steps, executions, [], [])
    assert clean.counters() == dict.fromkeys(("lost", "stuck", "wrong", "rerun_after_commit"), 0)

    first, second, waiter = plan.workflows[0], plan.workflows[2], plan.workflows[1]
    runs[first.id] = RunRow("RUNNING", None, None, 2, 1)  # never finished
    runs[second.id] = RunRow("SUCCEEDED", json.dumps({"acc": -1, "steps": 5}), None, 1, 0)
    signals[waiter.signal_key] = SignalRow(consumed=False, error=None)
    rerun = [json.dumps({"run_id": waiter.id, "index": 0})]
    damaged = judge(plan, started, runs, signals, steps, executions, rerun, [first.id])
    assert damaged.counters() == {"lost": 2, "stuck": 1, "wrong": 1, "rerun_after_commit": 1}
