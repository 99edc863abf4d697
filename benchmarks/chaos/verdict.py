"""Reading a chaos run's outcome (store and ledger, both directly) and judging it.

The observer reads the store on a connection of its own that bypasses the proxies, so
it sees the truth while the system under test is cut off. :func:`judge` turns what it
read and the ledger into the suite's counters.

Example::

    observer = Observer("postgresql://postgres@127.0.0.1/test", "chaos_ab12_", "chaos-ab12")
    runs = observer.runs()                      # id -> RunRow
    verdict = judge(plan, started, runs, observer.signals(), observer.work_steps(),
                    ledger_exec, reruns, stuck_ids=[])
    verdict.counters()    # {'lost': 0, 'stuck': 0, 'wrong': 0, 'rerun_after_commit': 0}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from benchmarks.chaos.plan import Plan, work_indexes

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclass(frozen=True)
class RunRow:
    status: str
    result: str | None
    error: str | None
    attempts: int
    dispatches: int


@dataclass(frozen=True)
class SignalRow:
    consumed: bool
    error: str | None


class Observer:
    """Direct, read-only access to this run's tables (reconnects once if cut)."""

    def __init__(self, libpq_url: str, prefix: str, namespace: str) -> None:
        self.url = libpq_url
        self.prefix = prefix
        self.namespace = namespace
        self._conn: Any = None

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        for last in (False, True):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                return list(self._conn.execute(sql, (self.namespace,)).fetchall())
            except psycopg.OperationalError:
                self._conn = None
                if last:
                    raise
        return []

    def runs(self) -> dict[str, RunRow]:
        rows = self._query(
            f'SELECT id, status, result, error, attempts, dispatches FROM "{self.prefix}runs" '
            "WHERE namespace = %s"
        )
        return {r[0]: RunRow(*r[1:]) for r in rows}

    def unfinished(self) -> list[str]:
        rows = self._query(
            f'SELECT id FROM "{self.prefix}runs" WHERE namespace = %s '
            "AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') ORDER BY id"
        )
        return [r[0] for r in rows]

    def running_owners(self) -> list[str]:
        """Owners (``host:pid:token``) of the runs a process holds right now."""
        rows = self._query(
            f'SELECT owner FROM "{self.prefix}runs" WHERE namespace = %s '
            "AND status = 'RUNNING' AND owner IS NOT NULL"
        )
        return [str(r[0]) for r in rows]

    def signals(self) -> dict[str, SignalRow]:
        """Stored signals by idempotency key (refused ones carry no key: by run id)."""
        rows = self._query(
            "SELECT coalesce(idempotency_key, 'refused:' || run_id), consumed_at IS NOT NULL, "
            f'error FROM "{self.prefix}signals" WHERE namespace = %s'
        )
        return {r[0]: SignalRow(bool(r[1]), r[2]) for r in rows}

    def work_steps(self) -> dict[str, dict[int, str]]:
        """run id -> {index: status} of the work steps."""
        rows = self._query(
            f'SELECT run_id, idx, status FROM "{self.prefix}steps" '
            "WHERE namespace = %s AND name = 'chaos.work'"
        )
        steps: dict[str, dict[int, str]] = {}
        for run_id, idx, status in rows:
            steps.setdefault(run_id, {})[int(idx)] = str(status)
        return steps

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Verdict:
    lost: list[str] = field(default_factory=list)
    lost_signals: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    wrong: list[dict[str, Any]] = field(default_factory=list)
    rerun: list[dict[str, Any]] = field(default_factory=list)
    step_executions: int = 0
    reexecutions: int = 0  # a step run again before its record committed (at-least-once)
    max_attempts_used: int = 0

    def counters(self) -> dict[str, int]:
        return {
            "lost": len(self.lost) + len(self.lost_signals),
            "stuck": len(self.stuck),
            "wrong": len(self.wrong),
            "rerun_after_commit": len(self.rerun),
        }


def judge(
    plan: Plan,
    started: set[str],
    runs: dict[str, RunRow],
    signals: dict[str, SignalRow],
    steps: dict[str, dict[int, str]],
    ledger_exec: Mapping[Any, Any],
    reruns: Sequence[Any],
    stuck_ids: list[str],
    dropped_signals: Sequence[str] = (),
) -> Verdict:
    """Count lost, stuck, wrong and re-run-after-commit results of a run."""
    verdict = Verdict(stuck=sorted(stuck_ids))
    executions = {str(key): int(value) for key, value in ledger_exec.items()}
    verdict.step_executions = sum(executions.values())
    verdict.reexecutions = sum(max(0, n - 1) for n in executions.values())
    verdict.rerun = [json.loads(r) for r in reruns]
    planned = {wf.id for wf in plan.workflows}
    for key in executions:
        if key.rsplit(":", 1)[0] not in planned:
            verdict.wrong.append({"id": key, "why": "a step of an unknown run executed"})
    for wf in plan.workflows:
        run = runs.get(wf.id)
        if wf.id not in started or run is None or run.status not in FINISHED:
            status = "never started" if run is None else run.status
            verdict.lost.append(f"{wf.id} ({status})")
            continue
        verdict.max_attempts_used = max(verdict.max_attempts_used, run.attempts)
        wrong = _wrong(wf.expected(), wf.kind, wf.id, run, steps.get(wf.id, {}), executions)
        if wrong:
            verdict.wrong.append({"id": wf.id, "kind": wf.kind, "why": wrong})
        if wf.waits:
            stored = signals.get(wf.signal_key)
            if stored is None or not stored.consumed or stored.error:
                verdict.lost_signals.append(f"{wf.signal_key} ({stored})")
    for run_id in dropped_signals:  # accepted, then lost by a worker (the resend rescued the run)
        verdict.lost_signals.append(f"{run_id}:go (acknowledged by a worker, never stored)")
    refused = [key for key in signals if key.startswith("refused:")]
    for key in refused:
        verdict.lost_signals.append(f"{key} ({signals[key]})")
    return verdict


def _wrong(
    expected: dict[str, int],
    kind: str,
    run_id: str,
    run: RunRow,
    steps: dict[int, str],
    executions: dict[str, int],
) -> str | None:
    if run.status != "SUCCEEDED":
        return f"status {run.status}: {(run.error or '')[:300]}"
    result = json.loads(run.result) if run.result else None
    if result != expected:
        return f"result {result} != expected {expected}"
    indexes = work_indexes(kind)
    if sorted(steps) != indexes or any(s != "ok" for s in steps.values()):
        return f"work step records {steps} != indexes {indexes} all ok"
    never_ran = [i for i in indexes if executions.get(f"{run_id}:{i}", 0) < 1]
    if never_ran:
        return f"work steps {never_ran} recorded but never executed (ledger)"
    return None
