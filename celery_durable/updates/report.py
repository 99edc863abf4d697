"""The requests a run received, as ``durable show`` lists them (in its text and its
JSON): each update's name, status (pending, received, answered, rejected, refused, or not
handled once the run ended without answering) and the step that took it.

Example::

    for line in update_lines(update_rows(durable, run)):
        click.echo(line)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery_durable.ops.console import iso
from celery_durable.ops.wing_parts import RunPart
from celery_durable.store import RunRecord
from celery_durable.updates.store_area import UPDATES, shown_status

if TYPE_CHECKING:
    from celery_durable.ops.operations import Operations


def update_rows(durable: Operations, run: RunRecord) -> list[dict[str, Any]]:
    """The run's requests, oldest first, for ``durable show --json`` (``updates``)."""
    store = durable.runtime.store
    return [
        {
            "id": u.id,
            "name": u.name,
            "status": shown_status(u.status, run.status),
            "step": u.idx,
            "idempotency_key": u.idempotency_key,
            "sent_at": iso(u.created_at),
            "answered_at": iso(u.answered_at),
        }
        for u in UPDATES.of(store).run_updates(run.id)
    ]


def update_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``updates:`` and one line per request: ``'add_item' answered (step 3)``."""
    if not rows:
        return []
    lines = ["updates:"]
    for row in rows:
        taken = "" if row["step"] is None else f" (step {row['step']})"
        lines.append(f"  update {row['name']!r} #{row['id']}: {row['status']}{taken}")
    return lines


# Refreshed with the run page's head: a request's status changes while the page is open.
UPDATES_PART = RunPart("updates", update_rows, update_lines, "_run_updates.html", live=True)
