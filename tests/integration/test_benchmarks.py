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
from typing import Any

import pytest

from tests.support.services import BROKER, PG_URL
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
    "durable_throughput_no_backend",
    "result_backend_ratio",
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
    "dashboard_runs_page_ms",
    "dashboard_run_page_ms",
    "chord_throughput",
    "map_throughput",
    "chord_latency_p50",
    "chord_latency_p99",
    "map_latency_p50",
    "map_latency_p99",
    "map_commits_per_item",
    "map_commits_per_item_all_in",
    "batched_map_vs_chord",
    "batched_map_vs_chunks",
    "batched_map_commits_per_item",
    "batched_map_finished_ms",
    "bigmap_seconds",
    "bigmap_messages",
    "bigmap_worker_rss",
    "bigmap_driver_rss",
    "sweep_ms_waiting_runs",
    "continue_as_new_claim_replay_ms",
    "io_task_throughput",
    "io_workflow_throughput_three_io",
    "io_workflow_throughput_three_io_deferred",
    "limiter_three_limited_steps_vs_unlimited",
    "limiter_three_steps_limited_run_vs_unlimited",
    "limiter_commits_three_steps",
    "limiter_commits_three_limited_steps",
    "limiter_commits_three_steps_limited_run",
    "limiter_backlog_run",
    "limiter_backlog_step",
    "limiter_rate",
    "async_throughput_ratio",
    "async_gathered_seconds",
    "async_sequence_seconds",
    "async_producer_lag_p99",
    "async_producer_starts_ratio",
    "async_recovery_worker_redis_p50",
}


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@pytest.mark.serial  # it counts the whole cluster's commits
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

    # 3 of them the limiter's (benchmarks/limits.py), 3 the batched map's, 1 the big map's,
    # 6 the async phase's (benchmarks/aio.py: its one quick kill's p50 and p99 among them);
    # a quick run has no liveness phase (its 8 targets).
    assert len(doc["targets"]) == 33
    for target in doc["targets"]:
        assert isinstance(target["pass"], bool)
        assert _positive(target["value"]), target
    backend = doc["raw"]["backend_report"]  # the same rounds, with and without the report
    assert backend["ratio_min"] <= backend["ratio"] <= backend["ratio_max"]
    assert len(backend["ratios"]) == doc["throughput_method"]["rounds"]
    limits = doc["raw"]["limits"]  # one comparison: the same rounds for the three kinds
    for name in ("three_limited_steps", "three_steps_limited_run"):
        ratio = limits["ratios"][name]
        assert ratio["ratio_min"] <= ratio["ratio"] <= ratio["ratio_max"]
        assert len(ratio["ratios"]) == doc["throughput_method"]["rounds"]
    assert limits["rate"]["starts_in_window"] > 0
    _check_async(doc)
    kill = doc["raw"]["kill"]
    for system in ("chord", "map"):
        assert isinstance(kill[system]["completed"], bool)
    assert kill["map"]["completed"] and kill["map"]["succeeded"]
    chords = doc["raw"]["kill_chord"]  # the callback of a chord of workflows: once, all 10
    assert chords["durable"]["completed"] and chords["durable"]["callback_runs"] == 1
    assert chords["durable"]["all_results"] and chords["durable"]["header_succeeded"] == 10
    assert isinstance(chords["plain"]["completed"], bool)
    assert "SIGKILL of the worker while members of a chord of 10 run" in proc.stdout
    scale = doc["raw"]["scale"]
    assert {c["pool"] for c in scale["configs"]} == {"prefork", "threads"}
    assert any(c["workers"] == 2 for c in scale["configs"])
    for config in scale["configs"]:
        assert _positive(config["plain"]["rate_per_s"]), config["label"]
        assert set(config["durable"]) == set(scale["workflows"]) >= {"three_steps"}
        for result in config["durable"].values():
            assert _positive(result["rate_per_s"]), config["label"]
        # Busy durable workers hold connections, and each worker's are told apart.
        connections = config["connections"]
        assert connections["per_worker_busy"] >= 1, config["label"]
        assert len(connections["busy_peak"]) == config["workers"], config["label"]
    assert "| workers |" in doc["scale_table"] and "| workers |" in proc.stdout
    assert doc["machine"]["nproc"] > 0
    assert doc["machine"]["postgres"]["server_version"]
    command = " ".join(doc["settings"]["worker_command"])
    assert "-P prefork -c 2" in command and "--loglevel=WARNING" in command
    assert "figure" in proc.stdout and "targets:" in proc.stdout


def _check_async(doc: dict[str, Any]) -> None:
    """The async phase's raw figures: each measured as many times as it says, and the
    bounds its workflows' sleeps set (ten steps of 0.2 s awaited in turn take 2 s at least)."""
    x, rounds = doc["raw"]["async"], doc["throughput_method"]["rounds"]
    ratio = x["throughput_ratio"]  # one comparison: the same rounds for sync and async
    assert ratio["ratio_min"] <= ratio["ratio"] <= ratio["ratio_max"]
    assert len(ratio["ratios"]) == rounds
    gather = x["gather"]
    for label, least in (("gathered", gather["io_s"]), ("sequence", 10 * gather["io_s"])):
        assert len(gather[label]["samples_s"]) == gather["reps"] > 0, label
        assert least <= gather[label]["p50_s"] <= gather[label]["max_s"], (label, gather)
    producer = x["producer"]
    assert producer["lag"]["ticks"] > 0 and producer["lag"]["p99_ms"] > 0
    assert len(producer["starts_ratio"]["ratios"]) == rounds
    for name in ("asyncio", "thread_pool"):
        assert [r["n"] for r in producer[name]["rounds"]] == [producer["runs"]] * rounds
        assert _positive(producer[name]["starts_per_s"]), name
    (kill,) = x["recovery"]
    assert (kill["workflow"], kill["broker"], kill["killed"]) == (
        "async_five_steps",
        "redis",
        "worker",
    )
    assert kill["recovered"] == kill["kills"] == 1


def _scale_raw() -> dict[str, object]:
    """A scale result of the shape ``benchmarks.scale.run`` returns (made-up rates)."""

    def config(label: str, workers: int) -> dict[str, object]:
        names = [f"w{i}" for i in range(workers)]
        return {
            "label": label,
            "pool": "prefork",
            "concurrency": 2,
            "workers": workers,
            "plain": {"rate_per_s": 500.0, "other_cores_busy": 0.1},
            "durable": {"three_steps": {"rate_per_s": 250.0, "other_cores_busy": 0.25}},
            "connections": {
                "at_start": dict.fromkeys(names, 1),
                "busy_peak": dict.fromkeys(names, 3),
                "idle": dict.fromkeys(names, 3),
                "per_worker_busy": 3,
                "per_worker_idle": 3,
            },
        }

    return {
        "n": 10,
        "io_n": 10,
        "workflows": ["three_steps"],
        "configs": [config("-P prefork -c 2", 1), config("2 x (-P prefork -c 2)", 2)],
        "io_config": "-P prefork -c 2",
        "io": {
            "plain": {"rate_per_s": 120.0},
            "durable": {"three_io": {"rate_per_s": 100.0, "overhead": 0.2}},
        },
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [1.0, 1.0, 1.0],
    }


def test_scale_table_and_target() -> None:
    from benchmarks import scale_report

    raw = _scale_raw()
    table = scale_report.table(raw)
    assert "| `-P prefork -c 2` | 500 | 250 (0.50) | 1 / 3 / 3 | 0.25 |" in table
    assert "Two workers against one (`-P prefork -c 2`): plain 1.00 x" in table
    assert "overhead +20.0%" in table
    (target,) = scale_report.targets(raw)
    assert target["value"] == pytest.approx(1.2) and target["pass"] is False


def test_scale_plot_is_skipped_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import scale_report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    message = scale_report.plot(_scale_raw(), tmp_path / "scale.png")
    assert "matplotlib is not installed" in message
    assert not (tmp_path / "scale.png").exists()


def test_scale_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks import scale_report

    path = tmp_path / "scale.png"
    assert scale_report.plot(_scale_raw(), path) == f"wrote {path}"
    assert path.read_bytes().startswith(b"\x89PNG")


def test_rounds_and_n_set_every_phase_and_refuse_what_counts_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.cli import parse_args, scale_for
    from benchmarks.throughput import FULL, IO_FULL, Method, method_for

    args = parse_args(["--rounds", "12", "--n", "500"])
    method = method_for(args.quick, args.n, rounds=args.rounds)
    assert method == Method(500, FULL.warmup, 12)
    assert scale_for(args.quick, method, args.fill).n == 500
    # Realistic work keeps its own N (its items take ~20 ms) and takes the rounds.
    assert method_for(False, args.n, io=True, rounds=args.rounds) == Method(
        IO_FULL.n, IO_FULL.warmup, 12
    )
    assert method_for(False) == FULL
    for argument, value in (("--rounds", "0"), ("--n", "-5"), ("--rounds", "many")):
        with pytest.raises(SystemExit):
            parse_args([argument, value])
        error = capsys.readouterr().err
        assert f"argument {argument}: must be a whole number of at least 1, not '{value}'" in error


@pytest.mark.serial  # it counts the whole cluster's commits
def test_an_idle_window_that_another_database_wrote_in_is_measured_again() -> None:
    """Commits are counted over the whole cluster: writes to another database during the
    idle window would pass for the workers' idle rate (a CI run once got -11.5 commits per
    10-step workflow that way), so such a window is taken again."""
    import threading
    import time
    from types import SimpleNamespace

    import psycopg

    from benchmarks.db import Monitor, libpq_url
    from benchmarks.windows import idle_window

    tag = "celery_durable_bench_idle_test"
    monitor = Monitor(f"{bench_database_url()}?application_name={tag}", "unused_", "unused")
    writing = threading.Event()

    def write_elsewhere() -> None:  # the suite's test database, not the benchmark's
        with psycopg.connect(libpq_url(PG_URL), autocommit=True) as conn:
            writing.set()
            until = time.monotonic() + 0.8
            while time.monotonic() < until:
                conn.execute("SELECT txid_current()")  # a transaction id, committed
                time.sleep(0.005)

    writer = threading.Thread(target=write_elsewhere)
    writer.start()
    try:
        assert writing.wait(10)
        window = idle_window(SimpleNamespace(monitor=monitor, tag=tag), 1.0)  # type: ignore[arg-type]
    finally:
        writer.join()
        monitor.close()
    assert window.clean, window.as_dict()
    assert window.commits < 10, window.as_dict()


@pytest.mark.broker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("workflow", ["five_steps", "async_five_steps"])
def test_the_liveness_benchmark_times_a_kill_on_this_broker(tmp_path: Path, workflow: str) -> None:
    """``python -m benchmarks.liveness``: one SIGKILL of a worker during a step of a sync
    or an async body, on the session's broker, reported as the time until the step
    started again elsewhere."""
    out = tmp_path / "liveness.json"
    broker = BROKER
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.liveness", "--broker", broker, "--kills", "1"]
        + ["--json", str(out), "--workflow", workflow],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    result = json.loads(out.read_text())
    assert (result["broker"], result["killed"], result["task"]) == (broker, "worker", "durable")
    assert result["workflow"] == workflow
    assert result["recovered"] == 1 and 0 < result["p50_s"] < 40


def test_the_liveness_benchmark_refuses_a_workflow_for_a_plain_task(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.liveness import main

    with pytest.raises(SystemExit):
        main(["--plain", "--workflow", "async_five_steps"])
    error = capsys.readouterr().err
    assert "--plain times a plain task: --workflow async_five_steps does not apply" in error
