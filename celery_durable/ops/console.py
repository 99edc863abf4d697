"""How the CLI prints runs: aligned tables for people, JSON for scripts; the values
every listing shares (times, durations, errors, attempts), ``durable list``, ``stats`` and
``fork``. One run in detail (``durable show``) is ``run_details``.

Times are UTC, ISO 8601 (``2026-12-02T10:03:07.120Z``) in JSON and to the second in
tables; durations are seconds in JSON and ``1.20s``, ``3m04s``, ``2h05m``, ``3d04h`` in
tables.

Example::

    for line in table(["ID", "STATUS"], [["order-42", "FAILED"]]):
        print(line)
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from celery_durable.store import (
    FINISHED_STATUSES,
    Collected,
    Forked,
    RunRecord,
    RunStats,
    RunSummary,
    StepRecord,
    attempt_of,
)
from celery_durable.store.engine_names import SIGNAL_STEP_PREFIX, waited_for

ERROR_WIDTH = 70
STATUS_COLUMNS = ("PENDING", "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED")


def iso(timestamp: float | None, precise: bool = True) -> str | None:
    """Epoch seconds as UTC ISO 8601 (milliseconds when ``precise``)."""
    if timestamp is None:
        return None
    moment = dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)
    text = moment.isoformat(timespec="milliseconds" if precise else "seconds")
    return text.replace("+00:00", "Z")


def span(seconds: float | None) -> str:
    """A duration for people: ``0.04s``, ``12.5s``, ``3m04s``, ``2h05m``, ``3d04h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def error_parts(error: str | None) -> dict[str, Any] | None:
    """A stored error (JSON) as a dict with type, message and traceback."""
    if not error:
        return None
    try:
        data = json.loads(error)
    except ValueError:
        return {"type": "unknown", "message": error, "traceback": ""}
    return data if isinstance(data, dict) else {"type": "unknown", "message": str(data)}


def error_summary(error: str | None, width: int = ERROR_WIDTH) -> str:
    """``RuntimeError: bug in charge``: the short type name and the message's first line."""
    parts = error_parts(error)
    if parts is None:
        return ""
    kind = str(parts.get("type", "unknown")).rpartition(".")[2]
    message = str(parts.get("message", "")).strip().splitlines()
    text = f"{kind}: {message[0]}" if message else kind
    return text if len(text) <= width else text[: width - 3] + "..."


def error_brief(error: str | None) -> dict[str, Any] | None:
    """A stored error's type and message, for JSON listings (the traceback is left out)."""
    parts = error_parts(error)
    return None if parts is None else {k: parts.get(k) for k in ("type", "message")}


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: int = 0) -> list[str]:
    """Aligned columns, two spaces apart; columns from index ``right`` on (if > 0) are
    right-aligned (numbers). The last column is not padded."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = []
        for i, cell in enumerate(row):
            last = i == len(row) - 1
            if right and i >= right:
                cells.append(str(cell).rjust(widths[i]))
            else:
                cells.append(str(cell) if last else str(cell).ljust(widths[i]))
        lines.append("  ".join(cells).rstrip())
    return lines


def attempts_of(run: Any) -> str:
    """``2/3``: the attempt the run is on or ended on, of its budget. A suspension gives
    its attempt back, so a run that ran counts at least one."""
    return f"{attempt_of(run.attempts, run.started_at)}/{run.max_attempts}"


def cancel_pending(status: str) -> str:
    """What a cancel requested of a run still RUNNING (or PENDING: a saga) waits for."""
    return "it stops at its next step" if status == "RUNNING" else "a worker rolls it back"


def cancel_line(run: RunRecord | RunSummary) -> str | None:
    """``cancel requested (reason): it stops at its next step`` while the run goes on."""
    if not run.cancel_requested or run.status in FINISHED_STATUSES:
        return None
    reason = f" ({run.cancel_reason})" if run.cancel_reason else ""
    return f"cancel requested{reason}: {cancel_pending(run.status)}"


def detail(run: RunSummary) -> str:
    """What a person wants to know next: the error, the cancel reason, what it waits for."""
    if run.cancel_requested and run.status not in FINISHED_STATUSES:
        return f"cancel requested: {run.cancel_reason}" if run.cancel_reason else "cancel requested"
    if run.status == "FAILED":
        return error_summary(run.error)
    if run.status == "CANCELLED":
        return f"cancelled: {run.cancel_reason}" if run.cancel_reason else "cancelled"
    if run.status == "WAITING":
        return f"waiting for {waited_for(run.wait_signal)}" if run.wait_signal else "sleeping"
    if run.recoveries:
        return f"worker lost {run.recoveries} time(s)"
    return ""


def took(run: Any) -> float | None:
    if run.status in FINISHED_STATUSES and run.started_at is not None:
        return float(run.finished_at - run.started_at) if run.finished_at else None
    return None


def run_table(runs: Sequence[RunSummary]) -> list[str]:
    headers = ["ID", "WORKFLOW", "STATUS", "ATTEMPT", "CREATED", "TOOK", "DETAIL"]
    rows = [
        [
            run.id,
            run.name,
            run.status,
            attempts_of(run),
            iso(run.created_at, precise=False) or "",
            span(took(run)) if took(run) is not None else "-",
            detail(run),
        ]
        for run in runs
    ]
    return table(headers, rows)


def run_json(run: RunSummary, cursor: str) -> dict[str, Any]:
    """One line of ``durable list --json``; ``cursor`` continues the listing after it."""
    return {
        "id": run.id,
        "workflow": run.name,
        "status": run.status,
        "attempts": run.attempts,
        "max_attempts": run.max_attempts,
        "recoveries": run.recoveries,
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration": took(run),
        "wait_signal": run.wait_signal,
        "cancel_requested": run.cancel_requested,
        "cancel_reason": run.cancel_reason,
        "forked_from": run.forked_from,
        "error": error_brief(run.error),
        "cursor": cursor,
    }


def stats_lines(stats: RunStats) -> list[str]:
    """Counts by workflow (a column per status), then the oldest runs and due backlog."""
    by_workflow: dict[str, dict[str, int]] = {}
    lost: dict[str, int] = {}
    for count in stats.counts:
        by_workflow.setdefault(count.workflow, {})[count.status] = count.runs
        lost[count.workflow] = lost.get(count.workflow, 0) + (count.recoveries or 0)
    headers = ["WORKFLOW", *STATUS_COLUMNS, "RECOVERIES"]
    rows = [
        [name, *(str(counts.get(s, 0)) for s in STATUS_COLUMNS), str(lost[name])]
        for name, counts in sorted(by_workflow.items())
    ]
    lines = table(headers, rows, right=1) if rows else ["no runs"]
    lines.append("(RECOVERIES: lost workers of the pending and running runs)")
    for label, oldest in (("pending", stats.oldest_pending), ("waiting", stats.oldest_waiting)):
        if oldest is None:
            lines.append(f"oldest {label}: none")
            continue
        what = f", waiting for {waited_for(oldest.wait_signal)}" if oldest.wait_signal else ""
        lines.append(
            f"oldest {label}: {oldest.id} ({oldest.name}), created {iso(oldest.created_at, False)}"
            f", {span(stats.now - oldest.created_at)} ago{what}"
        )
    if stats.due and stats.oldest_due_at is not None:
        behind = span(stats.now - stats.oldest_due_at)
        lines.append(
            f"due backlog: {stats.due} run(s) due for the sweeper, the oldest {behind} ago"
        )
    else:
        lines.append("due backlog: none")
    return lines


def stats_json(stats: RunStats) -> dict[str, Any]:
    def oldest(run: Any) -> dict[str, Any] | None:
        if run is None:
            return None
        return {
            "id": run.id,
            "workflow": run.name,
            "created_at": iso(run.created_at),
            "age": stats.now - run.created_at,
            "wait_signal": run.wait_signal,
        }

    return {
        "now": iso(stats.now),
        "counts": [
            {"workflow": c.workflow, "status": c.status, "runs": c.runs, "recoveries": c.recoveries}
            for c in stats.counts
        ],
        "recoveries": sum(c.recoveries or 0 for c in stats.counts),
        "oldest_pending": oldest(stats.oldest_pending),
        "oldest_waiting": oldest(stats.oldest_waiting),
        "due": {
            "runs": stats.due,
            "oldest_due_at": iso(stats.oldest_due_at),
            "behind": None if stats.oldest_due_at is None else stats.now - stats.oldest_due_at,
        },
    }


def decoded(raw: str | None) -> Any:
    """A stored JSON text as a value; text that is not JSON stays text."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def fork_lines(
    origin: str, from_step: int, forked: Forked, steps: Sequence[StepRecord]
) -> list[str]:
    """What ``durable fork`` did: the kept steps, the unconsumed signals it took, and each
    signal that a step it runs again had consumed (which stays consumed on the origin)."""
    assert forked.run is not None  # a refused fork raised
    new = forked.run.id
    kept = f"kept steps 0 to {from_step - 1}" if from_step else "kept no step"
    line = f"{new}: forked from {origin} at step {from_step} ({kept}), PENDING"
    if forked.signals:
        names = ", ".join(repr(name) for name in dict.fromkeys(forked.signals))
        count = len(forked.signals)
        line += f"; took {count} unconsumed signal{'s' * (count > 1)} ({names}) with it"
    lines = [line]
    for step in steps:
        name = step.name.removeprefix(SIGNAL_STEP_PREFIX)
        took = step.status == "ok" and step.output is not None  # not a timeout (no output)
        if step.idx >= from_step and name != step.name and took:
            lines.append(
                f"step {step.idx} consumed signal {name!r} on {origin}, and waits for it "
                f"again in the fork: resend it with durable signal {new} {name} PAYLOAD"
            )
    return lines


def collected_line(collected: Collected, dry_run: bool) -> str:
    """What ``durable gc`` deleted (or would): runs by status, then their rows; the
    signals count those of runs that no longer exist too."""
    by_status = ", ".join(f"{n} {s.lower()}" for s, n in sorted(collected.runs.items()))
    return (
        f"{'would delete' if dry_run else 'deleted'} {collected.total} run(s) finished before "
        f"{iso(collected.before, False)}{f' ({by_status})' if by_status else ''} "
        f"with {collected.steps} steps, {collected.signals} signals, {collected.state} "
        "state values"
    )
