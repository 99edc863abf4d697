"""Durable agents (issue 46): what a durable model request of a Pydantic AI agent run
(``celery_durable.contrib.pydantic_ai.CeleryDurability``) adds to the same run without
steps, and how many model requests a run makes again after a SIGKILL of its worker
mid-run. How each is measured: ``METHODS``.

``python -m benchmarks --agents-only`` runs them (``run_only``): the overhead on the
suite's durable worker, then, that worker stopped, the kills on workers of their own (the
fan-out kill's short lease and sweep, ``fanout.KILL_SETTINGS``). The agents and their
workflows are ``benchmarks/app.py``'s, defined when ``BENCH_AGENTS`` is set (the driver
sets it for itself and its workers).

Example::

    r = run(b, log_dir, scale_for(quick=False), worker, progress)
    r["overhead"]["per_request_ms"]             # (durable - plain) / K, medians
    r["kills"]["repeated"]                      # model requests made again, all kills
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery.exceptions import TimeoutError as CeleryTimeout

from benchmarks import fanout
from benchmarks.talk import alternate_runs, failure, flagged
from benchmarks.workers import WorkerProcess, wait_until
from celery_durable import WorkflowFailed

if TYPE_CHECKING:
    from benchmarks.measure import Bench
    from benchmarks.throughput import Method

RUN_TIMEOUT_S = 120.0  # a timed run's .get()
HOLD_TIMEOUT_S = 60.0  # the killed run's wait for its tool call to hold
RECOVERY_TIMEOUT_S = 120.0  # a killed run's wait to finish on the fresh worker

# The targets.
OVERHEAD_TARGET_MS = 5.0  # a durable model request over the same request without a step
REPEATED_TARGET = 0  # model requests made again after the kills, all of them

METHODS = {
    "agents": (
        "--agents-only (benchmarks/agents.py). Overhead: two Pydantic AI agents on the "
        "offline FunctionModel, identical but for capabilities=[CeleryDurability()] on one; "
        "the model asks for a no-op tool (tool_plain, metadata={'celery_durable': False}: "
        "never a step) K-1 times, then answers: K = 20 model requests a run. The async "
        "workflows agent_durable (await the durable agent's run: each model request a step, "
        "Postgres) and agent_plain (the plain agent's run in an async body: no step) run on "
        "one durable worker (the suite's command line, Redis broker), one at a time, .get(), "
        "in turn, the order reversed every other repetition, after a warm-up run of each; a "
        "run's time is its started_at (its first claim) to its finished_at, both the "
        "database's clock. Overhead per model request = (median durable - median plain) / "
        "K; beside it the median of the per-repetition (durable - plain) / K. One untimed "
        "run of each after them counts its step records (the durable: K, the model requests "
        "alone, if the tool's metadata keeps it out of steps). Kills: once that worker "
        "stopped, on workers of the same command line with lock_timeout 5 s, poll_interval "
        "0.5 s and dispatch_grace 5 s: agent_killed, a durable agent of the same K whose "
        "model function counts each request it answers in Redis (INCR under the run's key) "
        "and whose tool (a step, the capability's default) holds at its 10th call while a "
        "Redis flag is set; once that call holds, SIGKILL of the worker's process group, "
        "the flag cleared, a fresh worker (the next kill's victim), .get() of the run (up to "
        "120 s). Repeated = requests made - K, summed over the kills; a run that did not "
        "finish fails the target. A timed run that took a second attempt or a recovery is "
        "kept and flagged RETRIED in the notes."
    )
}


@dataclass(frozen=True)
class AgentsScale:
    """Timed runs of each agent workflow, and kills."""

    reps: int
    kills: int


def scale_for(quick: bool) -> AgentsScale:
    if quick:
        return AgentsScale(3, 1)
    return AgentsScale(10, 5)


def _median(values: list[float]) -> float:
    """The median, or infinite (a target fails) when every run failed."""
    return statistics.median(values) if values else math.inf


def step_counts(b: Bench) -> dict[str, Any]:
    """One untimed run of each agent workflow: its step records, by name."""
    from benchmarks import app as bench

    out: dict[str, Any] = {}
    for label, flow in (("durable", bench.agent_durable), ("plain", bench.agent_plain)):
        handle = flow.delay()
        b.result_ids.append(handle.id)
        handle.get(timeout=RUN_TIMEOUT_S)
        names: dict[str, int] = {}
        for step in handle.steps():
            names[step.name] = names.get(step.name, 0) + 1
        out[label] = {"steps": sum(names.values()), "by_name": names}
    return out


def overhead(b: Bench, reps: int) -> dict[str, Any]:
    """``reps`` runs of ``agent_durable`` and of ``agent_plain`` in turn, after a warm-up
    run of each: a durable model request's cost over the same request without a step."""
    from benchmarks import app as bench

    k = bench.AGENT_REQUESTS
    flows = {"durable": bench.agent_durable, "plain": bench.agent_plain}
    seconds, again, failed = alternate_runs(b, flows, (), reps, timeout=RUN_TIMEOUT_S)
    times = {label: [t for t in values if t is not None] for label, values in seconds.items()}
    durable, plain = _median(times["durable"]), _median(times["plain"])
    per_rep = [
        (d - p) / k * 1000.0
        for d, p in zip(seconds["durable"], seconds["plain"], strict=True)
        if d is not None and p is not None
    ]
    return {
        "requests_per_run": k,
        "reps": reps,
        "clock": "started_at (the first claim) to finished_at, database clock",
        **{
            label: {
                "p50_s": _median(times[label]),
                "min_s": min(times[label], default=math.inf),
                "max_s": max(times[label], default=math.inf),
                "samples_s": values,
            }
            for label, values in seconds.items()
        },
        "per_request_ms": (durable - plain) / k * 1000.0
        if math.inf not in (durable, plain)
        else math.inf,
        "per_request_per_rep_ms": per_rep,
        "per_request_per_rep_p50_ms": _median(per_rep),
        "steps": step_counts(b),
        "retried": again,
        "failed": failed,
    }


def describe_overhead(x: dict[str, Any]) -> str:
    steps = x["steps"]["durable"]["steps"]
    return (
        f"agent run of {x['requests_per_run']} model requests: durable "
        f"{x['durable']['p50_s'] * 1000:.1f} ms, plain {x['plain']['p50_s'] * 1000:.1f} ms; "
        f"{x['per_request_ms']:.2f} ms a durable request (per-run p50 "
        f"{x['per_request_per_rep_p50_ms']:.2f} ms); {steps} steps a durable run" + flagged(x)
    )


def kill_worker(b: Bench, log_dir: Path, role: str) -> WorkerProcess:
    """A worker of the suite's command line with the fan-out kill's short lease and sweep
    (``fanout.KILL_SETTINGS``): a killed run is taken over within seconds."""
    worker = WorkerProcess(f"bench-{b.run_id}-{role}", fanout.KILL_SETTINGS, log_dir)
    b.worker_groups.add(worker.proc.pid)
    return worker.wait_ready()


def _count(b: Bench, key: str) -> int:
    return int(b.rds.get(key) or 0)


def killed_run(
    b: Bench, victim: WorkerProcess, log_dir: Path, role: str
) -> tuple[dict[str, Any], WorkerProcess]:
    """One ``agent_killed`` run on ``victim``, its process group SIGKILLed while tool call
    ``AGENT_BLOCK_AT`` holds, finished on a fresh worker: what it made, and that worker."""
    from benchmarks import app as bench

    key = b.key("agent-kill")
    b.rds.set(f"{key}:block", "1", ex=3600)
    handle = bench.agent_killed.delay(key)
    b.result_ids.append(handle.id)
    wait_until(
        lambda: b.rds.exists(f"{key}:blocked") or handle.ready(),
        HOLD_TIMEOUT_S,
        0.01,
        f"tool call {bench.AGENT_BLOCK_AT} to hold",
    )
    if not b.rds.exists(f"{key}:blocked"):
        raise RuntimeError(
            f"run {handle.id} finished ({handle.status().value}) before tool call "
            f"{bench.AGENT_BLOCK_AT} held: {handle.get(propagate=False)!r}"
        )
    at_kill = _count(b, f"{key}:requests")
    os.killpg(victim.proc.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.stop()
    b.rds.delete(f"{key}:block")
    fresh = kill_worker(b, log_dir, role)
    ready_at = time.time()
    outcome: dict[str, Any] = {"id": handle.id, "requests_at_kill": at_kill}
    try:
        handle.get(timeout=RECOVERY_TIMEOUT_S)
        outcome["finished"] = True
    except WorkflowFailed as exc:
        outcome.update(finished=False, failed=failure(handle, exc))
    except CeleryTimeout:
        outcome.update(finished=False, failed={"id": handle.id, "error": "not finished"})
    run = handle.record()
    made = _count(b, f"{key}:requests")
    outcome.update(
        requests=made,
        repeated=made - bench.AGENT_REQUESTS,
        tool_calls=_count(b, f"{key}:tools"),
        recoveries=run.recoveries,
        attempt=run.attempt,
        kill_to_finish_s=run.finished_at - killed_at if run.finished_at is not None else None,
        ready_to_finish_s=run.finished_at - ready_at if run.finished_at is not None else None,
    )
    return outcome, fresh


def repeated_requests(
    b: Bench, log_dir: Path, kills: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """``kills`` runs of ``agent_killed``, each SIGKILLed mid-run (``killed_run``), one
    after another; the fresh worker of one kill is the victim of the next."""
    from benchmarks import app as bench

    worker = kill_worker(b, log_dir, "agents-kill-0")
    runs: list[dict[str, Any]] = []
    try:
        for n in range(1, kills + 1):
            x, worker = killed_run(b, worker, log_dir, f"agents-kill-{n}")
            runs.append(x)
            took = (
                f"finished {x['kill_to_finish_s']:.2f} s after the kill, "
                f"{x['ready_to_finish_s']:.2f} s after the fresh worker was ready"
                if x["finished"]
                else f"NOT FINISHED ({x['failed']['error']})"
            )
            progress(
                f"kill {n}: {x['requests']} model requests made of {bench.AGENT_REQUESTS} "
                f"({x['requests_at_kill']} before the kill), {x['tool_calls']} tool calls; " + took
            )
    finally:
        worker.stop()
        try:
            fanout.drop_unacked(b, bench.QUEUE)  # the killed deliveries, back in an hour
        except Exception as exc:  # noqa: BLE001 - clean-up reports and goes on
            progress(f"could not drop unacked messages: {exc}")
    return {
        "kills": kills,
        "requests_per_run": bench.AGENT_REQUESTS,
        "held_at_tool_call": bench.AGENT_BLOCK_AT,
        "repeated": sum(x["repeated"] for x in runs),
        "finished": sum(x["finished"] for x in runs),
        "runs": runs,
        "settings": dict(fanout.KILL_SETTINGS),
    }


def describe_kills(x: dict[str, Any]) -> str:
    return (
        f"SIGKILL mid-run of an agent of {x['requests_per_run']} model requests, "
        f"{x['kills']} kill(s): {x['repeated']} requests repeated in all; "
        f"{x['finished']}/{x['kills']} runs finished"
    )


def run(
    b: Bench,
    log_dir: Path,
    scale: AgentsScale,
    worker: WorkerProcess,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """The overhead on ``worker`` (a durable one of the suite's command), then, that
    worker stopped (its sweeper would take the killed runs over), the kills."""
    r: dict[str, Any] = {"scale": asdict(scale)}
    o = r["overhead"] = overhead(b, scale.reps)
    progress(describe_overhead(o))
    worker.stop()
    k = r["kills"] = repeated_requests(b, log_dir, scale.kills, progress)
    progress(describe_kills(k))
    return r


def _steps_note(o: dict[str, Any]) -> str:
    """What the durable run's steps were: the model requests alone, or the tool's too."""
    steps, k = o["steps"]["durable"]["steps"], o["requests_per_run"]
    if steps == k:
        return f"{steps} steps a durable run (its model requests; the tool is no step)"
    return f"{steps} steps a durable run for {k} model requests: the figure counts them all"


def agents_figures(r: dict[str, Any]) -> list[Any]:
    """The durable agents' figures of a run (none if it measured none)."""
    from benchmarks.render import Figure

    if "agents" not in r:
        return []
    o, k = r["agents"]["overhead"], r["agents"]["kills"]
    figures = [
        Figure(
            f"agents_{label}_run_seconds",
            f"an agent run of {o['requests_per_run']} model requests, {what}, p50",
            o[label]["p50_s"],
            "s",
            note=f"{o[label]['min_s']:.3f}-{o[label]['max_s']:.3f} s over {o['reps']} runs; "
            "started_at to finished_at" + flagged(o),
        )
        for label, what in (("durable", "durable (Postgres)"), ("plain", "without steps"))
    ]
    per_rep = o["per_request_per_rep_ms"]
    figures.append(
        Figure(
            "agents_overhead_per_request_ms",
            "a durable model request over the same request without a step",
            o["per_request_ms"],
            "ms",
            note="(median durable - median plain) / "
            f"{o['requests_per_run']}; per run p50 {o['per_request_per_rep_p50_ms']:.2f} ms "
            f"({min(per_rep, default=math.inf):.2f}-{max(per_rep, default=math.inf):.2f}); "
            + _steps_note(o)
            + flagged(o),
        )
    )
    figures.append(
        Figure(
            "agents_repeated_requests",
            "model requests repeated after a SIGKILL mid-run",
            k["repeated"],
            "requests",
            note=f"over {k['kills']} kill(s) at tool call {k['held_at_tool_call']}; "
            f"{k['finished']}/{k['kills']} runs finished",
        )
    )
    return figures


def agents_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.render import target

    if "agents" not in r:
        return []
    o, k = r["agents"]["overhead"], r["agents"]["kills"]
    return [
        target(
            "a durable model request over the same request without a step (Postgres, offline "
            "model), p50 (ms)",
            o["per_request_ms"],
            "<=",
            OVERHEAD_TARGET_MS,
            note=f"per run p50 {o['per_request_per_rep_p50_ms']:.2f} ms; "
            + _steps_note(o)
            + flagged(o),
        ),
        target(
            f"model requests repeated after a SIGKILL mid-run, {k['kills']} kill(s)",
            k["repeated"],
            "<=",
            REPEATED_TARGET,
            note=f"{k['finished']}/{k['kills']} runs finished",
            ok=k["repeated"] <= REPEATED_TARGET and k["finished"] == k["kills"],
        ),
    ]


def run_only(
    args: Any,
    b: Bench,
    method: Method,
    start_worker: Callable[[str], Any],
    teardown: Callable[[], None],
    machine: dict[str, Any],
    progress: Callable[[str], None],
    wall_start: float,
    log_dir: Path,
) -> int:
    """``--agents-only``: migrate, one durable worker, the overhead on it; that worker
    stopped, the kills; prints the figures and writes the JSON."""
    from benchmarks import app as bench
    from benchmarks.render import report_phase

    r: dict[str, Any] = {}
    try:
        bench.durable.migrate()
        worker = start_worker("durable")
        r["agents"] = run(b, log_dir, scale_for(args.quick), worker, progress)
    finally:
        teardown()
    figures, targets = agents_figures(r), agents_targets(r)
    report_phase(
        "agents", args, b.run_id, method, machine, figures, targets, r, wall_start, METHODS
    )
    return 0
