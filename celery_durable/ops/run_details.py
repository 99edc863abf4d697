"""One run in detail, as ``durable show`` prints it: its times, where it comes from
(a fork, an earlier generation), what it waits for, its steps and their fan-out items,
pending signals and state keys, as lines for people or one JSON object (``--json``).
The values every listing shares (times, durations, errors) are ``console``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from celery_durable.engine.announce import UNANNOUNCED, announced_workflows
from celery_durable.engine.runtime_view import RuntimeView
from celery_durable.ops.console import decoded, error_brief, error_parts, iso, span, took
from celery_durable.runs.stored_runs import RunDetails
from celery_durable.store import FINISHED_STATUSES, ItemRow, RunRecord, StepRecord
from celery_durable.store.engine_names import UPDATE_STEP_PREFIX, waited_for

NOT_REACHED = "not reached"


def step_status(run: RunRecord, step: StepRecord) -> str:
    """A step's status as ``show`` gives it, in text and JSON alike: a wait that a finished
    run never got past (cancelled, or failed by a deadline, while waiting) was not reached."""
    if step.status == "waiting" and run.status in FINISHED_STATUSES:
        return NOT_REACHED
    return step.status


def step_json(run: RunRecord, step: StepRecord) -> dict[str, Any]:
    return {
        "index": step.idx,
        "name": step.name,
        "status": step_status(run, step),
        "duration": step.duration,
        "started_at": iso(step.started_at),
        "attempt": step.attempt,
        "input": decoded(step.input),
        "output": decoded(step.output),
        "error": error_brief(step.error),
    }


def waiting_of(run: RunRecord) -> dict[str, Any] | None:
    """What a WAITING run waits for: a signal, its timer, or both (a timeout); or a
    limiter's slot (a WAITING run at a step, a PENDING one for the whole run)."""
    if run.wait_limiter is not None and run.status in ("WAITING", "PENDING"):
        return {"limiter": run.wait_limiter}
    if run.status != "WAITING":
        return None
    if run.wait_signal is not None and run.wait_signal.startswith(UPDATE_STEP_PREFIX):
        return {
            "update": run.wait_signal.removeprefix(UPDATE_STEP_PREFIX),
            "until": iso(run.due_at),
        }
    return {"signal": run.wait_signal, "until": iso(run.due_at)}


def details_json(details: RunDetails) -> dict[str, Any]:
    """``durable show --json``: one object with the run, steps, waits, signals, state keys."""
    run = details.run
    return {
        "id": run.id,
        "workflow": run.name,
        "status": run.status,
        "attempt": run.attempt,
        "max_attempts": run.max_attempts,
        "recoveries": run.recoveries,
        "queue": run.queue,
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration": took(run),
        "cancel_requested": run.cancel_requested,
        "cancel_reason": run.cancel_reason,
        "forked_from": (
            None
            if run.forked_from is None
            else {"id": run.forked_from, "step": run.forked_from_step}
        ),
        "compensation": run.compensation,
        "generation": run.generation,
        "continued_from": run.continued_from,
        "continued_as": run.continued_as,
        "error": error_parts(run.error),
        "waiting": waiting_of(run),
        "steps": [step_json(run, step) for step in details.steps],
        # The steps above are one page (--steps-from, --steps-limit) of step_count.
        "step_count": details.step_count,
        "steps_from": details.steps_from,
        "next_steps_from": details.next_steps_from,
        "pending_signals": [
            {"name": s.name, "sent_at": iso(s.created_at), "idempotency_key": s.idempotency_key}
            for s in details.pending_signals
        ],
        "state_keys": [{"key": k.key, "updated_at": iso(k.updated_at)} for k in details.state_keys],
        "actions": [
            {"action": a.action, "actor": a.actor, "detail": a.detail, "at": iso(a.created_at)}
            for a in details.actions
        ],
    }


def step_times(step: StepRecord) -> str:
    """``1.20s  attempt 2  started 2026-11-30T06:21:40.512Z``: what is known of when a step
    ran (rows from before migration 0006 know only their duration)."""
    parts = [] if step.duration is None else [span(step.duration)]
    if step.attempt is not None:
        parts.append(f"attempt {step.attempt}")
    if step.started_at is not None:
        parts.append(f"started {iso(step.started_at)}")
    return "  ".join(parts)


def times_line(run: RunRecord) -> str:
    """``created ..., started ..., finished ... (took 1.20s)``, and lost workers."""
    parts = [f"created {iso(run.created_at, False)}"]
    if run.started_at is not None:
        parts.append(f"started {iso(run.started_at, False)}")
    if run.finished_at is not None:
        parts.append(f"finished {iso(run.finished_at, False)}")
    line = ", ".join(parts)
    if took(run) is not None:
        line += f" (took {span(took(run))})"
    if run.recoveries:
        line += f"; its worker was lost {run.recoveries} time(s)"
    return line


def fork_line(run: RunRecord) -> str | None:
    """Where the run comes from (a fork, an earlier generation) and how it rolled back;
    the compensations that ran are among its steps (``celery_durable.compensate:...``)."""
    lines = []
    if run.forked_from is not None:
        step = run.forked_from_step or 0
        kept = f"steps 0 to {step - 1} kept" if step else "no step kept"
        lines.append(f"forked from {run.forked_from} at step {step} ({kept})")
    if run.continued_from is not None:
        lines.append(f"generation {run.generation}, continued from {run.continued_from}")
    if run.continued_as is not None:
        lines.append(f"an archived generation of {run.continued_as} (continued as new)")
    if run.compensation is not None:
        lines.append(f"{run.status.lower()}, {run.compensation} (rolled back)")
    return "\n".join(lines) or None


def ended_cancel_line(run: RunRecord) -> str | None:
    """The cancel of a finished run, with its reason, as the JSON's ``cancel_reason``."""
    if not run.cancel_requested or run.status not in FINISHED_STATUSES:
        return None
    reason = f": {run.cancel_reason}" if run.cancel_reason else ""
    if run.status == "CANCELLED":
        return f"cancelled{reason}"
    return f"cancel requested{reason}; it had {run.status.lower()} first"


def wait_line(run: RunRecord) -> str | None:
    waiting = waiting_of(run)
    if waiting is None:
        return None
    if "limiter" in waiting:
        return f"waiting for a slot of limiter {run.wait_limiter!r}"
    until = f" until {iso(run.due_at, False)}" if run.due_at is not None else ""
    if run.wait_signal:
        return f"waiting for {waited_for(run.wait_signal)}{until}"
    return f"sleeping{until}"


def signals_line(details: RunDetails) -> str | None:
    names: dict[str, int] = {}
    for signal in details.pending_signals:
        names[signal.name] = names.get(signal.name, 0) + 1
    if not names:
        return None
    shown = ", ".join(f"{name!r} x{n}" if n > 1 else repr(name) for name, n in names.items())
    return f"pending signals: {shown}"


def action_lines(details: RunDetails) -> list[str]:
    """``cancel by alice at <time>: <detail>``, one line per operator action."""
    return [
        f"{a.action} by {a.actor or 'an unauthenticated user'} at {iso(a.created_at)}"
        + (f": {a.detail}" if a.detail else "")
        for a in details.actions
    ]


def state_line(details: RunDetails) -> str | None:
    if not details.state_keys:
        return None
    return "state keys: " + ", ".join(repr(k.key) for k in details.state_keys)


def unstarted_queues(rows: Sequence[ItemRow]) -> set[str]:
    """The queues holding items that were published and never started."""
    return {row.queue for row in rows if row.not_started and row.queue}


def item_json(row: ItemRow) -> dict[str, Any]:
    """An item for ``durable show --json``."""
    return {
        "step": row.idx,
        "item": row.item,
        "status": row.status,
        "attempts": row.attempts,
        "queue": row.queue,
        "not_started": row.not_started,
        "child": row.child_id,
        "child_status": row.child_status,
    }


def item_lines(rows: Sequence[ItemRow], max_items: int, idle: set[str]) -> list[str]:
    """A fan-out's items (counts by state, the queues its unstarted items wait in, then
    one line each) or its child. ``idle``: queues no running worker consumes."""
    if not rows:
        return []
    if rows[0].child_id is not None:
        child = rows[0]
        return [f"    child {child.child_id}: {child.child_status or 'missing'}"]
    counts: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
        if row.not_started:
            queue = row.queue or "(default)"
            waiting[queue] = waiting.get(queue, 0) + 1
    summary = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
    lines = [f"    {len(rows)} item(s): {summary}"]
    for queue, count in sorted(waiting.items()):
        line = f"    {count} item(s) published to queue {queue!r}, not started"
        if queue in idle:
            line += f"; no worker consumes {queue!r}: start one (celery worker -Q {queue})"
        lines.append(line)
    shown = rows if max_items <= 0 else rows[:max_items]
    for row in shown:
        if row.not_started:
            where = f"queue {row.queue!r}" if row.queue else "the default queue"
            lines.append(f"    item {row.item}: pending, not started (published to {where})")
        else:
            lines.append(f"    item {row.item}: {row.status} (attempt {row.attempts})")
    if len(shown) < len(rows):
        lines.append(f"    ... {len(rows) - len(shown)} more (--max-items 0 lists all)")
    return lines


def unannounced_line(runtime: RuntimeView, run: RunRecord, max_age: float = 0.0) -> str | None:
    """For a PENDING run: the line saying that no running worker of its namespace
    announces its workflow (a broadcast, about a second, unless one was made within
    ``max_age`` s); None when one does, when that is unknown, for any other status, and
    in eager mode."""
    if run.status != "PENDING" or runtime.app.conf.task_always_eager:
        return None  # eager mode has no workers to announce anything
    announced = announced_workflows(runtime.app, runtime.config.namespace, max_age)
    if announced is None or run.name in announced:
        return None
    return f"{UNANNOUNCED}: start a worker whose app imports {run.name}; it takes the run at once"


# Steps ``durable show`` prints by default: a looping run's history can be 100,000 long.
STEPS_LIMIT = 1000


def steps_page_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--steps-from`` and ``--steps-limit``: which page of a run's steps to print."""
    command = click.option(
        "--steps-limit",
        type=click.IntRange(min=0),
        default=STEPS_LIMIT,
        show_default=True,
        help="Steps printed at most (0: all of them).",
    )(command)
    return click.option(
        "--steps-from",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="The step index the printed steps start at.",
    )(command)


def page_line(details: RunDetails) -> str | None:
    """Which steps were printed, when not all of them were, and how to see the others."""
    shown = len(details.steps)
    if shown == details.step_count:
        return None
    if not shown:
        return f"no step from index {details.steps_from} ({details.step_count} in all)"
    line = f"steps {details.steps[0].idx} to {details.steps[-1].idx} shown of {details.step_count}"
    after = details.next_steps_from
    return line if after is None else f"{line}; the next page: --steps-from {after}"
