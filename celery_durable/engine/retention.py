"""Retention: the sweeper deletes finished runs older than ``durable_retention``, a batch
at a time, and gc and retention log what they deleted in one form."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from celery_durable.core.logs import run_fields
from celery_durable.store import FINISHED_STATUSES, Collected

if TYPE_CHECKING:
    from celery_durable.engine.runtime_view import RuntimeView

logger = logging.getLogger("celery_durable.operations")

# Retention deletes in smaller batches, from the sweeper's thread, a batch per status per
# sweep: each is a short transaction that holds only finished rows, which no hot-path
# statement touches.
RETENTION_BATCH = 100


def collect_retained(runtime: RuntimeView, retention: float) -> Collected:
    """One batch per finished status of the runs older than ``durable_retention`` (the
    sweeper calls this); a full batch means more are left for the next sweep."""
    store = runtime.store
    cutoff = store.now() - retention
    total = Collected(before=cutoff)
    for finished in FINISHED_STATUSES:
        total += store.gc_runs(finished, cutoff, RETENTION_BATCH)
    if total.total:
        log_collected("retention", total, f"{retention:g}s")
    return total


def log_collected(what: str, collected: Collected, older_than: Any) -> None:
    by_status = ", ".join(f"{n} {s.lower()}" for s, n in sorted(collected.runs.items()))
    logger.info(
        "%s deleted %d finished run(s) older than %s (%s) with %d steps, %d signals and "
        "%d state values",
        what,
        collected.total,
        older_than,
        by_status or "none",
        collected.steps,
        collected.signals,
        collected.state,
        extra=run_fields(None),
    )
