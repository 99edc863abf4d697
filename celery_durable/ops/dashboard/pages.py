"""What each page shows, read through the operations API and turned into plain dicts.

The templates only lay these out. Reads: ``list_runs`` and ``stats`` for the runs page,
``describe_run`` (what ``durable show`` prints), the items and state values for a run,
``recent_durations`` for the workflows page.

Example::

    runs = runs_page(durable, {"status": ["failed"], "workflow": "shop.checkout"}, redact)
    run = run_page(durable, "order-42", redact)   # None if there is no such run
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from celery_durable.core.redact import Redactor
from celery_durable.ops import console, run_details
from celery_durable.ops.dashboard.values import VALUE_LIMIT, error_of, percentile, run_row, shown
from celery_durable.ops.wing_parts import WING_PARTS
from celery_durable.runs.stored_runs import RunDetails
from celery_durable.store import ALL_STATUSES, FINISHED_STATUSES, ItemRow, RunStats, StepRecord
from celery_durable.store.areas import STATE_READS
from celery_durable.store.reads import (
    consumed_signals,
    current_steps,
    recent_durations,
    runs_by_id_prefix,
    step_at,
)

PAGE_SIZE = 50
# How long the run page reuses the workers' answer to which workflows they announce: its
# live part refreshes every few seconds, and each ask is a broadcast of about a second.
ANNOUNCED_MAX_AGE = 10.0
# Steps a run page shows: the live refresh reads this page again, never the whole history.
STEPS_PAGE = 100

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


def summary(stats: RunStats) -> dict[str, Any]:
    """The strip above the runs table: counts by status, the oldest pending and waiting."""
    counts = dict.fromkeys(ALL_STATUSES, 0)
    for count in stats.counts:
        counts[count.status] = counts.get(count.status, 0) + count.runs

    shared = console.stats_json(stats)  # what `durable stats --json` says of them

    def oldest(which: str) -> dict[str, Any] | None:
        run = shared[which]
        return None if run is None else {**run, "age": console.span(run["age"])}

    return {
        "counts": counts,
        "total": sum(counts.values()),
        "oldest_pending": oldest("oldest_pending"),
        "oldest_waiting": oldest("oldest_waiting"),
        "workflows": sorted({c.workflow for c in stats.counts}),
        "due": stats.due,
    }


def runs_page(durable: Operations, args: Mapping[str, Any], stats: RunStats) -> dict[str, Any]:
    """The runs table for the filters in ``args`` (``status`` a list, ``workflow``,
    ``since``, ``until``, ``q`` an id or id prefix, ``after`` the keyset cursor).

    Raises InvalidArgument for a filter that does not parse (the page says which)."""
    statuses = [s for s in args.get("status", []) if s]
    workflow = args.get("workflow") or None
    since = args.get("since") or None
    until = args.get("until") or None
    query = (args.get("q") or "").strip()
    after = args.get("after") or None
    cursor = None
    if query:
        found = runs_by_id_prefix(durable.runtime.store, query, PAGE_SIZE)
        wanted = {s.upper() for s in statuses}
        runs = [r for r in found if not wanted or r.status in wanted]
        runs = [r for r in runs if workflow is None or r.name == workflow]
    else:
        page = durable.list_runs(statuses or None, workflow, since, until, PAGE_SIZE, after)
        runs, cursor = page.runs, page.cursor
    current = current_steps(durable.runtime.store, [run.id for run in runs])
    return {
        "rows": [run_row(run, stats.now, current.get(run.id)) for run in runs],
        "cursor": cursor,
        "filters": {
            "status": [s.upper() for s in statuses],
            "workflow": workflow or "",
            "since": since or "",
            "until": until or "",
            "q": query,
        },
        "paged": after is not None,
    }


def _items_by_step(rows: list[ItemRow], max_items: int) -> dict[int, dict[str, Any]]:
    grouped: dict[int, list[ItemRow]] = {}
    for row in rows:
        grouped.setdefault(row.idx, []).append(row)
    out: dict[int, dict[str, Any]] = {}
    for idx, items in grouped.items():
        if items[0].child_id is not None:
            out[idx] = {"child": items[0].child_id, "child_status": items[0].child_status}
            continue
        counts: dict[str, int] = {}
        for row in items:
            counts[row.status] = counts.get(row.status, 0) + 1
        out[idx] = {
            "counts": sorted(counts.items()),
            "total": len(items),
            "items": items[:max_items],
            "more": max(0, len(items) - max_items),
        }
    return out


def step_when(step: StepRecord, run_started: float | None) -> str:
    """``attempt 2 · started 11:11:50.935 (+1.21s)``: the run's attempt that ran the step,
    its time of day and how long after the run's first start (not for a step copied from a
    fork's origin, which ran before); "" for a row from before migration 0006."""
    parts = [] if step.attempt is None else [f"attempt {step.attempt}"]
    if step.started_at is not None:
        began = f"started {(console.iso(step.started_at) or '')[11:23]}"
        after = None if run_started is None else step.started_at - run_started
        if after is not None and after > -0.001:
            began += f" (+{console.span(after)})"
        parts.append(began)
    return " · ".join(parts)


def run_page(
    durable: Operations,
    run_id: str,
    redact: Redactor,
    max_items: int = 100,
    steps_from: int | None = None,
) -> dict[str, Any] | None:
    """Everything the run page shows, with STEPS_PAGE steps from index ``steps_from`` on
    (None: the last ones, where a running run is now); None if there is no such run."""
    details = durable.describe_run(run_id, steps_from, STEPS_PAGE)
    if details is None:
        return None
    store = durable.runtime.store
    run = details.run
    items = durable.list_items(run_id) if details.steps else []
    children = sorted({r.child_id for r in items if r.child_id is not None})
    finished = run.status in FINISHED_STATUSES
    longest = max((s.duration or 0.0 for s in details.steps), default=0.0) or 1.0
    steps = []
    for step in details.steps:
        status = step.status
        if status == "waiting" and finished:
            status = "not reached"
        steps.append(
            {
                "idx": step.idx,
                "name": step.name,
                "status": status,
                "duration": console.span(step.duration) if step.duration is not None else "-",
                "when": step_when(step, run.started_at),
                "started_at": console.iso(step.started_at),
                "bar": round(100 * (step.duration or 0.0) / longest, 1),
                "input": shown(step.input, redact),
                "output": None if step.output is None else shown(step.output, redact),
                "error": error_of(step.error, redact) if step.status != "ok" else None,
            }
        )
    state = [
        {
            "key": key.key,
            "updated": console.iso(key.updated_at, False),
            "value": shown(STATE_READS.of(store).get_state(run_id, key.key), redact),
        }
        for key in details.state_keys
    ]
    parts = [
        {
            "name": part.name,
            "template": part.template,
            "live": part.live,
            "value": part.read(durable, run),
        }
        for part in WING_PARTS.run_parts
    ]
    return {
        "id": run.id,
        "workflow": run.name,
        "status": run.status,
        "finished": finished,
        "attempt": console.attempts_of(run),
        "recoveries": run.recoveries,
        "queue": run.queue,
        "created": console.iso(run.created_at, False),
        "started": console.iso(run.started_at, False),
        "finished_at": console.iso(run.finished_at, False),
        "took": console.span(console.took(run)) if console.took(run) is not None else None,
        "parent": None if run.parent_id is None else (run.parent_id, run.parent_idx),
        "children": children,
        "forked_from": None if run.forked_from is None else (run.forked_from, run.forked_from_step),
        "cancel_reason": run.cancel_reason,
        "cancel_requested": console.cancel_line(run),
        "waiting": run_details.waiting_of(run),
        "unannounced": run_details.unannounced_line(durable.runtime, run, ANNOUNCED_MAX_AGE),
        "wait_items": run.wait_items,
        "args": shown(run.args, redact),
        "result": None if run.result is None else shown(run.result, redact),
        "error": error_of(run.error, redact),
        "steps": steps,
        "items": _items_by_step(items, max_items),
        "signals": [
            {"name": s.name, "sent": console.iso(s.created_at, False), "key": s.idempotency_key}
            for s in details.pending_signals
        ],
        "consumed": [
            {
                "name": s.name,
                "sent": console.iso(s.created_at, False),
                "consumed": console.iso(s.consumed_at, False),
                "payload": shown(s.payload, redact, limit=VALUE_LIMIT // 4),
            }
            for s in consumed_signals(store, run_id)
        ],
        "state": state,
        "actions": [
            {
                "action": a.action,
                "actor": a.actor,
                "detail": a.detail,
                "when": console.iso(a.created_at, False),
            }
            for a in details.actions
        ],
        # The steps before the page are taken as finished, as they are but for a frontier.
        "forkable": details.steps_from + sum(1 for s in details.steps if s.status == "ok"),
        "step_pages": step_pages(details, steps_from),
        # What the wings show of the run (its streams, its updates), each in its template.
        "parts": parts,
        # How many things the parts drawn once show (streams): the live refresh reloads
        # the page when a new one begins, since they are outside what it refreshes.
        "parts_shown": sum(
            len(p["value"]) for p in parts if not p["live"] and isinstance(p["value"], list)
        ),
    }


def step_pages(details: RunDetails, asked: int | None) -> dict[str, Any]:
    """Where this page of steps sits in the history, and the pages around it (the
    ``steps_from`` of each; None where there is none)."""
    first = details.steps_from
    last = details.steps[-1].idx if details.steps else None
    return {
        "count": details.step_count,
        "first": first,
        "last": last,
        "asked": asked,  # the live refresh keeps an earlier page the user chose
        "earlier": max(0, first - STEPS_PAGE) if first > 0 else None,
        "later": details.next_steps_from,
    }


def full_value(durable: Operations, run_id: str, what: str, redact: Redactor) -> str | None:
    """The whole of one value of a run (``args``, ``result``, ``step-3-input``,
    ``step-3-output``, ``state-<key>``), redacted; None if there is none."""
    store = durable.runtime.store
    if what in ("args", "result"):
        run = store.get_run(run_id)
        raw = None if run is None else getattr(run, what)
    elif what.startswith("state-"):
        raw = STATE_READS.of(store).get_state(run_id, what[len("state-") :])
    else:
        _, _, rest = what.partition("step-")
        idx, _, field = rest.partition("-")
        if not idx.isdigit() or field not in ("input", "output"):
            return None
        step = step_at(store, run_id, int(idx))
        raw = None if step is None else getattr(step, field)
    return None if raw is None else shown(raw, redact, limit=None).text


def workflows_page(durable: Operations, stats: RunStats) -> list[dict[str, Any]]:
    """Each registered (or seen) workflow: counts by status, p50/p95 over the last hour."""
    counts: dict[str, dict[str, int]] = {name: {} for name in durable.runtime.workflows}
    for count in stats.counts:
        counts.setdefault(count.workflow, {})[count.status] = count.runs
    durations = recent_durations(durable.runtime.store, 3600.0)
    rows = []
    for name in sorted(counts):
        took = durations.get(name, [])
        p50, p95 = percentile(took, 0.5), percentile(took, 0.95)
        rows.append(
            {
                "name": name,
                "registered": name in durable.runtime.workflows,
                "counts": [(s, counts[name].get(s, 0)) for s in ALL_STATUSES],
                "total": sum(counts[name].values()),
                "recent": len(took),
                "p50": console.span(p50) if p50 is not None else "-",
                "p95": console.span(p95) if p95 is not None else "-",
            }
        )
    return rows
