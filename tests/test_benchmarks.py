"""Smoke test of the benchmark suite: ``python -m benchmarks --quick`` runs end to end.

No timing is asserted: only that every figure is measured (a positive number) and that each
target got a verdict. Needs Postgres and Redis like the rest of the suite.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import PG_URL
from tests.support.workers import ROOT, clean_env

BENCH_DATABASE = "celery_durable_bench"


def bench_database_url() -> str:
    """A database of its own: the commit counts read pg_stat_database, which anything
    else writing to the test database would add to."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL)
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DATABASE,)
        ).fetchone()
        if found is None:
            try:
                conn.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
            except psycopg.errors.DuplicateDatabase:
                pass  # another session created it meanwhile
    return url.set(database=BENCH_DATABASE).render_as_string(hide_password=False)


FIGURES = {
    "plain_task_throughput",
    "plain_chain_throughput",
    "durable_throughput",
    "durable_throughput_filled",
    "plain_task_latency_p50",
    "plain_task_latency_p99",
    "plain_chain_latency_p50",
    "plain_chain_latency_p99",
    "durable_latency_p50",
    "durable_latency_p99",
    "signal_resume_latency_p50",
    "signal_resume_latency_p99",
    "replay_ms",
    "commits_per_workflow_3_steps",
    "commits_per_workflow_10_steps",
    "commits_per_step",
    "commits_per_workflow_fixed",
    "operations_list_ms",
    "operations_stats_ms",
    "chord_throughput",
    "map_throughput",
    "chord_latency_p50",
    "chord_latency_p99",
    "map_latency_p50",
    "map_latency_p99",
    "map_commits_per_item",
    "map_commits_per_item_all_in",
}


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@pytest.mark.timeout(560)
def test_quick_benchmark_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
            "--database-url",
            bench_database_url(),
        ],
        cwd=ROOT,
        env=clean_env(),  # the suite's own settings, not the test session's
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    doc = json.loads(out.read_text())

    figures = doc["figures"]
    assert FIGURES <= set(figures), f"missing figures: {sorted(FIGURES - set(figures))}"
    for name, figure in figures.items():
        assert _positive(figure["value"]), f"{name} = {figure['value']!r}"
        for ratio in ("vs_plain_task", "vs_plain_chain"):
            assert figure[ratio] is None or _positive(figure[ratio]), f"{name}.{ratio}"

    assert len(doc["targets"]) == 13
    for target in doc["targets"]:
        assert isinstance(target["pass"], bool)
        assert _positive(target["value"]), target
    kill = doc["raw"]["kill"]
    for system in ("chord", "map"):
        assert isinstance(kill[system]["completed"], bool)
    assert kill["map"]["completed"] and kill["map"]["succeeded"]
    assert doc["machine"]["nproc"] > 0
    assert doc["machine"]["postgres"]["server_version"]
    command = " ".join(doc["settings"]["worker_command"])
    assert "-P prefork -c 2" in command and "--loglevel=WARNING" in command
    assert "figure" in proc.stdout and "targets:" in proc.stdout
